// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Machine } from "../api/generated";
import * as api from "../api/v1alpha1";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { Nodes } from "./nodes";

const ready = (name: string, address: string, role = api.RoleWorker): Machine => ({
  name,
  address,
  role,
  stage: api.StageRunning,
  approval: { state: api.ApprovalApproved },
  conditions: [{ type: api.ReadyCondition, status: "True" }],
});
const machines: Machine[] = [
  ready("w-2", "10.0.0.10"),
  ready("cp-1", "10.0.0.9", api.RoleControlPlane),
  { ...ready("w-1", "10.0.0.21"), conditions: [{ type: api.ReadyCondition, status: "False", reason: "NodeUnreachable" }] },
  { name: "new-1", address: "10.0.0.30", approval: { state: api.ApprovalPending } },
];

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function show(canWrite: boolean) {
  const ctx: Console = {
    client: {} as Client,
    me: { username: "ada", groups: [] },
    cluster: null,
    clusterError: null,
    refreshCluster: () => {},
    machines,
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite,
  };
  await act(() => {
    render(
      <ConsoleContext.Provider value={ctx}>
        <Nodes />
      </ConsoleContext.Provider>,
      root,
    );
  });
}

const names = () => [...root.querySelectorAll<HTMLElement>("tr[data-machine]")].map((r) => r.dataset.machine);

async function sortBy(key: string) {
  await act(() => root.querySelector<HTMLButtonElement>(`[data-sort=${key}]`)?.click());
}

async function type(sel: string, value: string, ev = "input") {
  await act(() => {
    const el = root.querySelector<HTMLInputElement | HTMLSelectElement>(sel)!;
    el.value = value;
    el.dispatchEvent(new Event(ev, { bubbles: true }));
  });
}

describe("Nodes", () => {
  it("sorts by a column, both ways, and says so in aria-sort", async () => {
    await show(true);
    expect(names()).toEqual(["cp-1", "new-1", "w-1", "w-2"]);
    await sortBy("address");
    expect(names()).toEqual(["cp-1", "w-2", "w-1", "new-1"]); // 10.0.0.9 before 10.0.0.10
    await sortBy("address");
    expect(names()).toEqual(["new-1", "w-1", "w-2", "cp-1"]);
    expect(root.querySelector("[data-sort=address]")?.closest("th")?.getAttribute("aria-sort")).toBe("descending");
    expect(root.querySelector("[data-sort=name]")?.closest("th")?.getAttribute("aria-sort")).toBe("none");
    await sortBy("state");
    expect(names()[0]).toBe("w-1"); // the problem first
  });

  it("filters by text and by state", async () => {
    await show(true);
    await type("[data-testid=nodes-filter]", "10.0.0.2");
    expect(names()).toEqual(["w-1"]);
    await type("[data-testid=nodes-filter]", "");
    await type("[data-testid=nodes-state]", "problems", "change");
    expect(names()).toEqual(["w-1"]);
    await type("[data-testid=nodes-state]", "pending", "change");
    expect(names()).toEqual(["new-1"]);
    await type("[data-testid=nodes-filter]", "nothing-matches");
    expect(names()).toEqual([]);
    expect(root.querySelector("[data-testid=nodes-none]")).not.toBeNull();
  });

  it("offers row actions: approve a pending machine, open an approved one", async () => {
    await show(true);
    const row = (n: string) => root.querySelector(`tr[data-machine="${n}"]`)!;
    const actions = (n: string) => [...row(n).querySelectorAll("td[data-label=Actions] a")].map((a) => `${a.textContent} ${a.getAttribute("href")}`);
    expect(actions("new-1")).toEqual(["Approve… /add-node"]);
    expect(actions("w-1")).toEqual(["Open /nodes/w-1", "Kubernetes /nodes/w-1/kubernetes"]);
    await show(false);
    expect(actions("new-1")).toEqual(["Review /add-node"]);
  });
});
