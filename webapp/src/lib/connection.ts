import type { Tone } from "../components/ui/badge";

/**
 * How long a heartbeat stays fresh. The console reads the cluster every
 * pollMs; a successful read (or a machine event) is a heartbeat of ichor-ui.
 * Two missed reads and a bit make the data stale.
 */
export const pollMs = 5000;
export const staleAfterMs = 2 * pollMs + 2000;

/** Connection is what the console knows of its link to ichor-ui (not of the cluster's health). */
export interface Connection {
  state: "connecting" | "live" | "reconnecting" | "lost";
  /** The words shown next to the dot. */
  text: string;
  tone: Tone;
  /** When ichor-ui last answered (ms since the epoch), 0 when it never did. */
  asOf: number;
  /** Why, when the last call failed. */
  cause?: string;
}

export interface ConnectionFacts {
  now: number;
  /** The last heartbeat: a successful cluster read or a machine event. */
  lastBeat: number;
  /** The machine watch is open. */
  watchLive: boolean;
  /** The last cluster read failed with this text, if it did. */
  error?: string;
}

/** clock is a time of day for "data as of", in the browser's locale. */
export function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/**
 * connectionOf says how current the console's data is: "connecting" until
 * ichor-ui first answers; "live" while it answers and the machine watch is
 * open; "reconnecting" while the watch reopens or a read failed but the last
 * heartbeat is fresh; "lost" once the heartbeat is stale, with the time the
 * data is from and the cause.
 */
export function connectionOf(f: ConnectionFacts): Connection {
  if (!f.lastBeat) {
    return f.error
      ? { state: "lost", text: "Cannot reach ichor-ui", tone: "bad", asOf: 0, cause: f.error }
      : { state: "connecting", text: "Connecting…", tone: "neutral", asOf: 0 };
  }
  const fresh = f.now - f.lastBeat < staleAfterMs;
  if (fresh && f.watchLive && !f.error) return { state: "live", text: "Live", tone: "ok", asOf: f.lastBeat };
  if (fresh) return { state: "reconnecting", text: "Reconnecting…", tone: "warn", asOf: f.lastBeat, cause: f.error };
  return { state: "lost", text: `Connection lost · data as of ${clock(f.lastBeat)}`, tone: "bad", asOf: f.lastBeat, cause: f.error };
}
