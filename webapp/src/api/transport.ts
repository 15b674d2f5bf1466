import { ApiError } from "./errors";
import { readNDJSON } from "./ndjson";
import { createClient, type CallOptions, type Query, type RpcStatus, type Transport } from "./generated";

/** TokenSource hands out the current access token and renews it once on a 401. */
export interface TokenSource {
  accessToken(): Promise<string>;
  renew(): Promise<string>;
}

function url(path: string, query: Query | undefined): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v !== undefined && v !== "" && v !== false) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** httpReasons are the reason phrases of the statuses ichor-ui and a proxy in front of it answer (HTTP/2 carries none). */
const httpReasons: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  408: "Request Timeout",
  409: "Conflict",
  413: "Content Too Large",
  429: "Too Many Requests",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/**
 * errorOf reads a failed answer's cause: grpc-gateway's status (a unary
 * call's body, or {"error": status} when a stream fails before its first
 * message), else the first line of a text body (a proxy's page), else the
 * status with its reason phrase.
 */
export async function errorOf(resp: Response): Promise<ApiError> {
  const status = `${resp.status} ${resp.statusText || httpReasons[resp.status] || "error"}`;
  let text = "";
  try {
    text = await resp.text();
  } catch {
    text = "";
  }
  try {
    const v = JSON.parse(text) as RpcStatus & { error?: RpcStatus };
    const st = v.error && typeof v.error === "object" ? v.error : v;
    if (st.message) return new ApiError(resp.status, st, status);
  } catch {
    // not JSON: a proxy's or the server's text
  }
  const line = text.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim().slice(0, 200);
  return new ApiError(resp.status, undefined, line ? `${status}: ${line}` : `ichor-ui answered ${status}`);
}

/** NetworkError is a call that got no answer at all: ichor-ui or the network is down. */
export class NetworkError extends Error {
  constructor(cause: unknown) {
    super(`ichor-ui did not answer (${cause instanceof Error ? cause.message : String(cause)}): check that it runs and that this browser reaches it`);
    this.name = "NetworkError";
  }
}

async function fetchOrNetworkError(input: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(input, init);
  } catch (e) {
    if (init.signal?.aborted) throw e;
    throw new NetworkError(e);
  }
}

/** fetchTransport calls the REST mapping of the UI API with a bearer token. */
export function fetchTransport(tokens: TokenSource): Transport {
  async function send(method: string, path: string, query: Query | undefined, body: unknown, options?: CallOptions): Promise<Response> {
    const go = async (token: string) =>
      fetchOrNetworkError(url(path, query), {
        method,
        headers: {
          Authorization: `Bearer ${token}`,
          Accept: "application/json",
          ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
        },
        body: body !== undefined ? JSON.stringify(body) : undefined,
        signal: options?.signal,
      });
    let resp = await go(await tokens.accessToken());
    if (resp.status === 401) {
      resp = await go(await tokens.renew());
    }
    if (!resp.ok) throw await errorOf(resp);
    return resp;
  }
  return {
    async unary<T>(method: string, path: string, query: Query | undefined, body: unknown, options?: CallOptions) {
      const resp = await send(method, path, query, body, options);
      return (await resp.json()) as T;
    },
    async stream<T>(method: string, path: string, query: Query | undefined, onMessage: (m: T) => void, options?: CallOptions) {
      const resp = await send(method, path, query, undefined, options);
      if (!resp.body) return;
      try {
        await readNDJSON(resp.body, (v) => {
          const frame = v as { result?: T; error?: RpcStatus };
          if (frame.error) throw new ApiError(200, frame.error, "the stream failed");
          if (frame.result !== undefined) onMessage(frame.result);
        });
      } catch (e) {
        // A connection cut mid-stream is a TypeError of the body's reader.
        if (e instanceof TypeError && !options?.signal?.aborted) throw new NetworkError(e);
        throw e;
      }
    },
  };
}

export { createClient };
