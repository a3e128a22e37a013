/** Request bodies and paths, as cheaply as the hot path needs them: the body held to its limit, the path sliced. */
import { ErrorCode } from '../../protocol/index.js';
import { jsonRpcError } from './answers.js';
import type { Reply, FrontRequest } from './exchange.js';
import type { FrontExtra } from './types.js';
import { refuseDeepBody } from './json-depth.js';

/** Reads a web-standard body, stopping once it is longer than `limit`. */
async function readLimited(request: Request, limit: number): Promise<Uint8Array | 'too-large'> {
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) return 'too-large';
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => undefined);
      return 'too-large';
    }
    chunks.push(value);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

const decoder = new TextDecoder();

const tooLarge = (maxBody: number) => jsonRpcError(413, null, ErrorCode.InvalidRequest, `Request body exceeds ${maxBody} bytes; send less (large inputs belong in resources)`);

/** The body as JSON, held to the limit whichever way it came; at once when the adapter read or parsed it. */
export function parseBody(request: FrontRequest, extra: FrontExtra | undefined, maxBody: number): Promise<{ parsed: unknown } | Reply> | { parsed: unknown } | Reply {
  if (extra?.parsedBody !== undefined) {
    // Parsed by a framework: its JSON text is what the client sent, near enough to hold it to the same limit (its
    // depth first: JSON.stringify recurses).
    const deep = refuseDeepBody(extra.parsedBody);
    if (deep) return deep;
    const text = JSON.stringify(extra.parsedBody);
    return text !== undefined && Buffer.byteLength(text) > maxBody ? tooLarge(maxBody) : { parsed: extra.parsedBody };
  }
  if (extra?.bodyConsumed) {
    return jsonRpcError(400, null, ErrorCode.InvalidRequest, 'The request body was already read by a body parser and not handed over: pass it on, e.g. handler.node(req, res, req.body)');
  }
  if (extra?.rawBody === undefined) return readLimited(request.web(), maxBody).then((body) => parseRaw(body, maxBody));
  return parseRaw(extra.rawBody, maxBody);
}

function parseRaw(body: Uint8Array | 'too-large', maxBody: number): { parsed: unknown } | Reply {
  if (body === 'too-large' || body.byteLength > maxBody) return tooLarge(maxBody);
  let parsed: unknown;
  try {
    parsed = JSON.parse(decoder.decode(body));
  } catch (e) {
    return jsonRpcError(400, null, ErrorCode.ParseError, `Parse error: the body is not valid JSON (${(e as Error).message})`);
  }
  return refuseDeepBody(parsed) ?? { parsed };
}

/** The path of a request URL, without building a URL object (the hot path parses none). */
export function pathnameOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2);
  if (start < 0) return '/';
  let end = url.length;
  const q = url.indexOf('?', start);
  if (q >= 0) end = q;
  const h = url.indexOf('#', start);
  if (h >= 0 && h < end) end = h;
  return url.slice(start, end);
}
