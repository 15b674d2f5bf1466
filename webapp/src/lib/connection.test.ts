import { describe, expect, it } from "vitest";
import { connectionOf, staleAfterMs } from "./connection";

const t0 = Date.parse("2026-12-01T12:00:00Z");

describe("connectionOf", () => {
  it("says Connecting… before ichor-ui first answers, not Reconnecting…", () => {
    expect(connectionOf({ now: t0, lastBeat: 0, watchLive: false })).toMatchObject({ state: "connecting", text: "Connecting…" });
  });

  it("is live while the heartbeat is fresh and the watch is open", () => {
    expect(connectionOf({ now: t0 + 3000, lastBeat: t0, watchLive: true }).state).toBe("live");
  });

  it("is reconnecting while the watch reopens and the heartbeat is fresh", () => {
    expect(connectionOf({ now: t0 + 3000, lastBeat: t0, watchLive: false }).state).toBe("reconnecting");
  });

  it("is lost once the heartbeat is stale, even when the watch still looks open, with the time of the data", () => {
    const c = connectionOf({ now: t0 + staleAfterMs + 1, lastBeat: t0, watchLive: true, error: "ichor-ui did not answer (Failed to fetch)" });
    expect(c.state).toBe("lost");
    expect(c.asOf).toBe(t0);
    expect(c.text).toMatch(/^Connection lost · data as of /);
    expect(c.cause).toContain("Failed to fetch");
  });

  it("is lost with its cause when ichor-ui never answered", () => {
    expect(connectionOf({ now: t0, lastBeat: 0, watchLive: false, error: "ichor-ui answered 502 Bad Gateway" })).toMatchObject({ state: "lost", cause: "ichor-ui answered 502 Bad Gateway" });
  });
});
