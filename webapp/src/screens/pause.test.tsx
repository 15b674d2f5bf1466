// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Cluster, PauseClusterRequest } from "../api/generated";
import { ApiError } from "../api/errors";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { scanState, whyNoScan } from "../lib/pause";
import { PauseControl, PausedNotice, ScanNow } from "./pause";

/** A client that records the cluster calls the screens make and answers with what it is given. */
function client(fail?: Error) {
  const calls: { method: string; body: unknown }[] = [];
  const answer = (method: string) => ({ body }: { body: unknown }) => {
    calls.push({ method, body });
    return fail ? Promise.reject(fail) : Promise.resolve({ cluster: {} });
  };
  const c = { pauseCluster: answer("pause"), resumeCluster: answer("resume"), scanDiscovery: answer("scan") };
  return { c: c as unknown as Client, calls };
}

const running: Cluster = { name: "prod", paused: false, discovery: { subnets: ["10.5.0.0/24"], lastScanTime: new Date(Date.now() - 120_000).toISOString() } };
const paused: Cluster = { ...running, paused: true, pausedReason: "disk swap on cp-2", pausedSince: "2026-05-04T03:02:01Z" };

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

function consoleOf(c: Client, cluster: Cluster, canWrite: boolean, refreshed: { n: number } = { n: 0 }): Console {
  return {
    client: c,
    me: { username: "olivia", groups: [canWrite ? "ichor:operator" : "ichor:viewer"] },
    cluster,
    clusterError: null,
    refreshCluster: () => refreshed.n++,
    machines: [],
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite,
  };
}

async function show(ctx: Console, node: preact.ComponentChildren) {
  await act(() => {
    render(<ConsoleContext.Provider value={ctx}>{node}</ConsoleContext.Provider>, root);
  });
  await settle();
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function click(sel: string) {
  const b = q<HTMLButtonElement>(sel);
  expect(b, sel).not.toBeNull();
  await act(() => {
    b!.click();
  });
  await settle();
}

describe("Pause and resume the cluster", () => {
  it("pauses with the reason typed in the dialog, and refreshes the cluster", async () => {
    const { c, calls } = client();
    const refreshed = { n: 0 };
    await show(consoleOf(c, running, true, refreshed), <PauseControl />);
    expect(q("[data-testid=cluster-resume]")).toBeNull();
    await click("[data-testid=cluster-pause-open]");
    expect(root.textContent).toContain("no drift correction, no provisioning, no removal");
    const input = q<HTMLInputElement>("#pause-reason")!;
    await act(() => {
      input.value = "disk swap on cp-2";
      input.dispatchEvent(new Event("input", { bubbles: true }));
    });
    await act(() => {
      q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(calls).toEqual([{ method: "pause", body: { reason: "disk swap on cp-2" } satisfies PauseClusterRequest }]);
    expect(refreshed.n).toBe(1);
  });

  it("offers Resume on a paused cluster", async () => {
    const { c, calls } = client();
    await show(consoleOf(c, paused, true), <PauseControl />);
    expect(q("[data-testid=cluster-pause-open]")).toBeNull();
    await click("[data-testid=cluster-resume]");
    expect(calls).toEqual([{ method: "resume", body: {} }]);
  });

  it("shows the backend's refusal", async () => {
    const { c } = client(new ApiError(403, { code: 7, message: 'user "ichor:olivia" may not update talosclusters' }, ""));
    await show(consoleOf(c, paused, true), <PauseControl />);
    await click("[data-testid=cluster-resume]");
    expect(q("[role=alert]")?.textContent).toContain("may not update talosclusters");
  });

  it("offers a viewer no button", async () => {
    const { c } = client();
    await show(consoleOf(c, running, false), <PauseControl />);
    expect(root.querySelector("button")).toBeNull();
    await show(consoleOf(c, paused, false), <PauseControl />);
    expect(root.querySelector("button")).toBeNull();
  });

  it("tells everyone that the cluster is paused, since when and why", async () => {
    const { c } = client();
    await show(consoleOf(c, paused, false), <PausedNotice cluster={paused} />);
    expect(root.textContent).toContain("Cluster prod is paused");
    expect(q("[data-testid=paused-notice]")?.textContent).toContain(new Date("2026-05-04T03:02:01Z").toLocaleString());
    expect(q("[data-testid=paused-notice]")?.textContent).toContain("The controllers do nothing on it");
    expect(q("[data-testid=paused-reason]")?.textContent).toBe("Reason: disk swap on cp-2");

    const unconfirmed = { ...paused, pausedSince: undefined };
    await show(consoleOf(c, unconfirmed, false), <PausedNotice cluster={unconfirmed} />);
    expect(q("[data-testid=paused-notice]")?.textContent).toContain("the controller has not confirmed it yet");

    await show(consoleOf(c, running, false), <PausedNotice cluster={running} />);
    expect(root.textContent).toBe("");
  });
});

describe("Scan now", () => {
  it("asks for a scan and refreshes the cluster", async () => {
    const { c, calls } = client();
    const refreshed = { n: 0 };
    await show(consoleOf(c, running, true, refreshed), <ScanNow />);
    expect(q("[data-testid=scan-state]")?.textContent).toBe("Last scan 2m ago");
    await click("[data-testid=scan-now]");
    expect(calls).toEqual([{ method: "scan", body: {} }]);
    expect(refreshed.n).toBe(1);
  });

  it("says the request is pending and when it is due", () => {
    const due = "2026-05-04T03:02:31Z";
    expect(scanState({ scanPending: true, nextScanTime: due })).toBe(`Last scan not yet · scan requested, due ${new Date(due).toLocaleString()}`);
    expect(scanState({ nextScanTime: due })).toBe(`Last scan not yet · next scan ${new Date(due).toLocaleString()}`);
  });

  it("is disabled, with the reason, on a paused cluster and one with nothing registered", async () => {
    const { c, calls } = client();
    await show(consoleOf(c, paused, true), <ScanNow />);
    expect(q<HTMLButtonElement>("[data-testid=scan-now]")!.disabled).toBe(true);
    expect(q("#scan-why")?.textContent).toContain("paused");
    expect(whyNoScan({ name: "prod", discovery: {} })).toContain("Register an address or a subnet first");
    expect(calls).toHaveLength(0);
  });

  it("offers a viewer no button but the scan times", async () => {
    const { c } = client();
    await show(consoleOf(c, running, false), <ScanNow />);
    expect(q("[data-testid=scan-now]")).toBeNull();
    expect(q("[data-testid=scan-state]")?.textContent).toContain("Last scan");
  });
});
