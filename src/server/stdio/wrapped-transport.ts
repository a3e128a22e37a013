/**
 * A server transport that wraps another and passes everything through: the base of the stdio wrappers (server spans,
 * stdio-spans.ts; tasks/stream, stdio-task-stream.ts). A subclass takes what it handles in `receive` and hands the
 * rest on with `deliver`.
 */
import type { Transport } from '@modelcontextprotocol/server';

export type Message = Parameters<Transport['send']>[0];
export type OnMessage = NonNullable<Transport['onmessage']>;

export abstract class WrappedTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: OnMessage;

  constructor(protected readonly inner: Transport) {
    inner.onclose = () => {
      this.ended();
      this.onclose?.();
    };
    inner.onerror = (e) => this.onerror?.(e);
    inner.onmessage = ((message, extra) => this.receive(message, extra)) as OnMessage;
  }

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  get setProtocolVersion(): Transport['setProtocolVersion'] {
    return this.inner.setProtocolVersion?.bind(this.inner);
  }

  get setSupportedProtocolVersions(): Transport['setSupportedProtocolVersions'] {
    return this.inner.setSupportedProtocolVersions?.bind(this.inner);
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  send(message: Message, options?: Parameters<Transport['send']>[1]): Promise<void> {
    return this.inner.send(message, options);
  }

  async close(): Promise<void> {
    await this.inner.close();
    this.ended();
  }

  /** A message from the client: handle it, or pass it on with `deliver`. */
  protected abstract receive(message: Message, extra: Parameters<OnMessage>[1]): void;

  protected deliver(message: Message, extra: Parameters<OnMessage>[1]): void {
    this.onmessage?.(message, extra);
  }

  /** The connection ended (or was closed): what is still open ends with it. */
  protected ended(): void {}
}
