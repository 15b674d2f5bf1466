import type { Client } from "../api/generated";

/** The most lines the log view keeps; older ones are dropped. */
export const maxLogLines = 2000;

/** logServices are the services the log view offers: the node's, and the kernel log always. */
export function logServices(services: string[]): string[] {
  return [...new Set([...services, "kernel"])];
}

/** defaultLogService is the service shown first: kubelet when the node runs it, else its first service, else the kernel log. */
export function defaultLogService(services: string[]): string {
  return services.includes("kubelet") ? "kubelet" : (services[0] ?? "kernel");
}

/** appendLine is the buffer with the line added at the end, keeping the last max lines. */
export function appendLine(buf: string[], line: string, max = maxLogLines): string[] {
  return [...buf.slice(Math.max(0, buf.length - (max - 1))), line];
}

/** retryable reports whether a failed log stream is worth opening again: not when the backend lacks the call or forbids it. */
export function retryable(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const flags = e as { unimplemented?: boolean; forbidden?: boolean };
  return !flags.unimplemented && !flags.forbidden;
}

/** The first and the longest wait before opening a broken stream again (ms); it doubles after each failure. */
export const firstRetryMs = 1000;
export const maxRetryMs = 15000;

export interface FollowLogs {
  name: string;
  service: string;
  tailLines: number;
  follow: boolean;
}

/**
 * streamLogs streams a node's service log into onLines (the whole buffer,
 * oldest first, at most maxLogLines). When following, a stream that ends or
 * fails is opened again after a wait that doubles from 1 s to 15 s (reset by
 * a line), resuming after the last line's token; an error is reported through
 * onError, and one that a retry cannot fix (not implemented, forbidden, not an
 * Error) ends it. It returns when the signal aborts, or after the one read
 * when not following.
 */
export async function streamLogs(
  client: Pick<Client, "streamNodeLogs">,
  req: FollowLogs,
  onLines: (lines: string[]) => void,
  onError: (e: unknown) => void,
  signal: AbortSignal,
  wait: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
): Promise<void> {
  let token = "";
  let buf: string[] = [];
  let delay = firstRetryMs;
  while (!signal.aborted) {
    try {
      await client.streamNodeLogs(
        { name: req.name, service: req.service, tailLines: req.tailLines, follow: req.follow, resumeToken: token || undefined },
        (l) => {
          token = l.resumeToken || token;
          buf = appendLine(buf, l.line ?? "");
          onLines(buf);
          delay = firstRetryMs;
        },
        { signal },
      );
      if (!req.follow) return;
    } catch (e) {
      if (signal.aborted) return;
      onError(e);
      if (!retryable(e)) return;
    }
    await wait(delay);
    delay = Math.min(delay * 2, maxRetryMs);
  }
}
