// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Cluster } from "../api/generated";
import { ApiError } from "../api/errors";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { RecoveryNotice } from "./recovery";

/** A client that records the cluster calls the screens make and answers with what it is given. */
function client(fail?: Error) {
  const calls: { method: string; body: unknown }[] = [];
  const answer = (method: string) => ({ body }: { body: unknown }) => {
    calls.push({ method, body });
    return fail ? Promise.reject(fail) : Promise.resolve({ cluster: {} });
  };
  const c = { confirmRecovery: answer("confirm") };
  return { c: c as unknown as Client, calls };
}

const recovered: Cluster = {
  name: "prod",
  recoveryHolds: [
    { machine: "prod-cp-1", role: "controlplane", address: "10.5.0.11", driftPaths: 0, reason: "Held" },
    { machine: "prod-wk-1", role: "worker", address: "10.5.0.21", driftPaths: 3, reason: "Held" },
  ],
};

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

describe("The recovery's holds on the Overview", () => {
  it("shows nothing when no machine is held by a recovery", async () => {
    const { c } = client();
    await show(consoleOf(c, { name: "prod" }, true), <RecoveryNotice cluster={{ name: "prod" }} />);
    expect(q("[data-testid=recovery-notice]")).toBeNull();
  });

  it("lists the held machines with their drift to everyone, and offers no Confirm to a viewer", async () => {
    const { c } = client();
    await show(consoleOf(c, recovered, false), <RecoveryNotice cluster={recovered} />);
    const list = q("[data-testid=recovery-holds]")!.textContent ?? "";
    expect(list).toContain("prod-cp-1 (controlplane, 10.5.0.11): no drift reported");
    expect(list).toContain("prod-wk-1 (worker, 10.5.0.21): 3 paths differ");
    expect(q("[data-testid=recovery-confirm-open]")).toBeNull();
  });

  it("confirms only once the cluster's name is typed, and says why a refusal happened", async () => {
    const { c, calls } = client();
    const refreshed = { n: 0 };
    await show(consoleOf(c, recovered, true, refreshed), <RecoveryNotice cluster={recovered} />);
    await click("[data-testid=recovery-confirm-open]");
    expect(q<HTMLButtonElement>("[data-testid=recovery-confirm]")!.disabled).toBe(true);
    const input = q<HTMLInputElement>("#recovery-confirm")!;
    await act(() => {
      input.value = "staging";
      input.dispatchEvent(new Event("input", { bubbles: true }));
    });
    expect(q<HTMLButtonElement>("[data-testid=recovery-confirm]")!.disabled).toBe(true);
    await act(() => {
      input.value = "prod";
      input.dispatchEvent(new Event("input", { bubbles: true }));
    });
    await click("[data-testid=recovery-confirm]");
    expect(calls).toEqual([{ method: "confirm", body: { confirmClusterName: "prod" } }]);
    expect(refreshed.n).toBe(1);

    const refused = client(new ApiError(400, { code: 9, message: "no TalosMachine of cluster prod is held by a recovery: nothing to confirm" }, ""));
    await show(consoleOf(refused.c, recovered, true), <RecoveryNotice cluster={recovered} />);
    await click("[data-testid=recovery-confirm-open]");
    const again = q<HTMLInputElement>("#recovery-confirm")!;
    await act(() => {
      again.value = "prod";
      again.dispatchEvent(new Event("input", { bubbles: true }));
    });
    await click("[data-testid=recovery-confirm]");
    expect(root.textContent).toContain("nothing to confirm");
  });
});
