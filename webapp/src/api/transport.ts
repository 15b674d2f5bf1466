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

async function errorOf(resp: Response): Promise<ApiError> {
  let status: RpcStatus | undefined;
  try {
    status = (await resp.json()) as RpcStatus;
  } catch {
    status = undefined;
  }
  return new ApiError(resp.status, status, `${resp.status} ${resp.statusText}`);
}

/** fetchTransport calls the REST mapping of the UI API with a bearer token. */
export function fetchTransport(tokens: TokenSource): Transport {
  async function send(method: string, path: string, query: Query | undefined, body: unknown, options?: CallOptions): Promise<Response> {
    const go = async (token: string) =>
      fetch(url(path, query), {
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
      await readNDJSON(resp.body, (v) => {
        const frame = v as { result?: T; error?: RpcStatus };
        if (frame.error) throw new ApiError(200, frame.error, "the stream failed");
        if (frame.result !== undefined) onMessage(frame.result);
      });
    },
  };
}

export { createClient };
