import { errorOf, NetworkError, type TokenSource } from "../api/transport";

/**
 * The admin-gated downloads of a node (ichor-ui's nodes.Downloads): each is
 * a GET whose answer is the file, fetched with the signed-in user's bearer
 * token. ichor-ui asks the controller for a short-lived Talos certificate it
 * keeps in its own memory: the browser only ever holds the file.
 */
export type DownloadKind = "support-bundle" | "etcd-snapshot" | "packet-capture" | "talosconfig";

/**
 * The reader talosconfig (nodes.TalosconfigPath): unlike the node downloads
 * the file is the credential, an os:reader certificate for one hour unless
 * asked (twelve at most), for operators and admins.
 */
export const talosconfigHours = [1, 4, 8, 12] as const;

/** The limits of a packet capture (contracts/pkg/download). */
export const captureLimits = { minSeconds: 1, maxSeconds: 300, defaultSeconds: 10, minSnapLen: 64, maxSnapLen: 65535 } as const;

/** downloadPath is the route of a node's download. */
export function downloadPath(kind: DownloadKind, node: string): string {
  if (kind === "talosconfig") return "/api/v1/cluster/talosconfig";
  return `/api/v1/nodes/${encodeURIComponent(node)}/${kind}`;
}

/** CaptureForm is what the packet capture form asks. */
export interface CaptureForm {
  iface: string;
  seconds: number;
  snapLen?: number;
  promiscuous?: boolean;
}

/** captureProblem is what is wrong with the form, named with the way out; "" when it can be sent. */
export function captureProblem(f: CaptureForm): string {
  if (!f.iface.trim()) return "Name the link to capture on (eth0, enp0s1…: the Links card of the Talos tab lists them).";
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$/.test(f.iface.trim())) return `"${f.iface}" is not a network interface name: at most 15 letters, digits, ".", "_" or "-".`;
  if (!Number.isFinite(f.seconds) || f.seconds < captureLimits.minSeconds || f.seconds > captureLimits.maxSeconds)
    return `Capture for ${captureLimits.minSeconds} to ${captureLimits.maxSeconds} seconds; take another capture for more.`;
  if (f.snapLen !== undefined && (f.snapLen < captureLimits.minSnapLen || f.snapLen > captureLimits.maxSnapLen))
    return `Keep ${captureLimits.minSnapLen} to ${captureLimits.maxSnapLen} bytes of each frame.`;
  return "";
}

/** captureQuery is the packet capture's query string values. */
export function captureQuery(f: CaptureForm): Record<string, string> {
  const q: Record<string, string> = { interface: f.iface.trim(), duration: `${f.seconds}s` };
  if (f.snapLen) q.snapLen = String(f.snapLen);
  if (f.promiscuous) q.promiscuous = "true";
  return q;
}

/** filenameOf reads the file name of a Content-Disposition header, else the fallback. */
export function filenameOf(disposition: string | null, fallback: string): string {
  const m = /filename="?([^";]+)"?/.exec(disposition ?? "");
  return m ? m[1] : fallback;
}

/** A downloaded file. */
export interface Downloaded {
  blob: Blob;
  filename: string;
}

/** Downloader fetches a download; it throws the backend's refusal (an ApiError) as any call does. */
export type Downloader = (kind: DownloadKind, node: string, query?: Record<string, string>, signal?: AbortSignal) => Promise<Downloaded>;

/** fetchDownloader fetches downloads with the session's token, renewing it once on a 401. */
export function fetchDownloader(tokens: TokenSource): Downloader {
  return async (kind, node, query, signal) => {
    const q = new URLSearchParams(query ?? {}).toString();
    const path = downloadPath(kind, node) + (q ? `?${q}` : "");
    const go = async (token: string) => {
      try {
        return await fetch(path, { headers: { Authorization: `Bearer ${token}` }, signal, credentials: "omit" });
      } catch (e) {
        if (signal?.aborted) throw e;
        throw new NetworkError(e);
      }
    };
    let resp = await go(await tokens.accessToken());
    if (resp.status === 401) resp = await go(await tokens.renew());
    if (!resp.ok) throw await errorOf(resp);
    return { blob: await resp.blob(), filename: filenameOf(resp.headers.get("Content-Disposition"), `${node}-${kind}`) };
  };
}

/** saveFile hands a downloaded file to the browser's save. */
export function saveFile(d: Downloaded): void {
  const url = URL.createObjectURL(d.blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = d.filename;
  a.rel = "noopener";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
