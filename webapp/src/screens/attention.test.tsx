// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { AttentionItem, Client, GetClusterHealthResponse, ListAttentionResponse } from "../api/generated";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { AttentionList } from "./attention";
import { Overview } from "./overview";

const now = Date.parse("2026-05-04T03:10:00Z");
const raw = 'NodeUnreachable: Unavailable: connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.21:50000: connect: connection refused"';
const items: AttentionItem[] = [
  {
    key: "TalosMachine/w-1/NodeHealthy",
    severity: "Error",
    kind: "TalosMachine",
    subject: "w-1",
    summary: "w-1: the node's Talos API does not answer (connection refused)",
    detail: raw,
    since: "2026-05-04T03:05:00Z",
    action: "OpenNode",
    command: "ichor machine get w-1",
  },
  { key: "TalosOperation/cfg-1", severity: "Error", kind: "TalosOperation", subject: "cfg-1", summary: "operation cfg-1 (config) stopped at step apply w-1", since: "2026-05-04T01:10:00Z", action: "ResumeOperation" },
  { key: "TalosMachine/w-2/RebootRequired", severity: "Warning", kind: "TalosMachine", subject: "w-2", summary: "a configuration change of w-2 waits for a rollout that reboots it (2 paths)", action: "Apply" },
  { key: "TalosMachine/new-1/approval", severity: "Warning", kind: "TalosMachine", subject: "new-1", summary: "new-1 (10.0.0.9) waits for approval", action: "Approve", since: "2026-05-01T03:10:00Z" },
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

async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

function rows() {
  return [...root.querySelectorAll<HTMLLIElement>("[data-testid=attention] > li")];
}

describe("AttentionList", () => {
  it("shows the backend's words as they come, with how long, the action and the raw text behind Details", async () => {
    const resumed: string[] = [];
    let applied = 0;
    await act(() => {
      render(<AttentionList items={items} canWrite={true} now={now} on={{ apply: () => applied++, resumeOperation: (n) => resumed.push(n), resumeCluster: () => {} }} />, root);
    });
    const r = rows();
    expect(r.map((li) => li.querySelector("[data-testid=attention-summary]")?.textContent)).toEqual(items.map((i) => i.summary));
    expect(r[0].querySelector("[data-testid=attention-since]")?.textContent).toBe("for 5m");
    expect(r[1].querySelector("[data-testid=attention-since]")?.textContent).toBe("for 2h");
    expect(r[3].querySelector("[data-testid=attention-since]")?.textContent).toBe("for 3d");
    // The raw gRPC text is only behind Details, never in the summary.
    expect(r[0].querySelector("[data-testid=attention-summary]")?.textContent).not.toContain("transport");
    const details = r[0].querySelector("details");
    expect(details?.open).toBe(false);
    expect(details?.querySelector("[data-testid=attention-detail]")?.textContent).toBe(raw);
    expect(details?.textContent).toContain("ichor machine get w-1");
    // Links to the subject, and the action.
    expect(r[0].querySelector("a")?.getAttribute("href")).toBe("/nodes/w-1");
    expect([...r[0].querySelectorAll("a")].map((a) => a.textContent)).toContain("Open node");
    expect(r[3].querySelector("a")?.getAttribute("href")).toBe("/add-node");
    expect([...r[3].querySelectorAll("a")].map((a) => a.textContent)).toContain("Approve…");
    expect(r[0].querySelector(".bg-destructive\\/12")).not.toBeNull();
    await act(() => {
      r[1].querySelector<HTMLButtonElement>("[data-testid=attention-resumeOperation]")?.click();
      r[2].querySelector<HTMLButtonElement>("[data-testid=attention-apply]")?.click();
    });
    expect(resumed).toEqual(["cfg-1"]);
    expect(applied).toBe(1);
  });

  it("offers a viewer links only: no Apply, no Resume", async () => {
    await act(() => {
      render(<AttentionList items={items} canWrite={false} now={now} on={{ apply: () => {}, resumeOperation: () => {}, resumeCluster: () => {} }} />, root);
    });
    expect(root.querySelectorAll("button")).toHaveLength(0);
    expect([...rows()[1].querySelectorAll("a")].map((a) => a.textContent)).toContain("Open operation");
    expect([...rows()[3].querySelectorAll("a")].map((a) => a.textContent)).toContain("Review");
  });
});

const healthy: GetClusterHealthResponse = {
  etcd: { members: [{ id: "a", hostname: "cp-1" }, { id: "b", hostname: "cp-2" }, { id: "c", hostname: "cp-3" }], healthy: 3, quorum: 2, hasQuorum: true },
  controlPlanes: [
    { machine: "cp-1", apiServerReady: true, etcdHealthy: true, etcdMessage: "leader" },
    { machine: "cp-2", apiServerReady: true, etcdHealthy: true, etcdMessage: "follower" },
    { machine: "cp-3", apiServerReady: true, etcdHealthy: true, etcdMessage: "follower" },
  ],
  nodes: [{ machine: "cp-1", role: "controlplane", talosVersion: "v1.14.1", kubeletVersion: "v1.37.2" }],
  talosVersion: "v1.14.1",
  kubernetesVersion: "1.37.2",
  certificatesMissing: "the cluster's status.certificates does not record the expiry of Talos API CA",
  events: [{ type: "Normal", reason: "Applied", kind: "TalosMachine", name: "cp-1", message: "applied the configuration" }],
};

function overviewConsole(attention: ListAttentionResponse, health: GetClusterHealthResponse): Console {
  const client = {
    listAttention: () => Promise.resolve(attention),
    getClusterHealth: () => Promise.resolve(health),
    listOperations: () => Promise.resolve({ operations: [] }),
    listBackups: () => Promise.resolve({ backups: [], cluster: "prod" }),
  } as unknown as Client;
  return {
    client,
    me: { username: "ada", groups: ["ichor:admin"] },
    cluster: { name: "prod", ready: "True", resourceVersion: "1" },
    clusterError: null,
    refreshCluster: () => {},
    machines: [],
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite: true,
  };
}

async function showOverview(ctx: Console) {
  await act(() => {
    render(
      <ConsoleContext.Provider value={ctx}>
        <Overview />
      </ConsoleContext.Provider>,
      root,
    );
  });
  await settle();
}

describe("Overview", () => {
  it("of a healthy cluster shows nothing to attend to and no red badge", async () => {
    await showOverview(overviewConsole({ items: [] }, healthy));
    expect(root.querySelector("[data-testid=attention-empty]")).not.toBeNull();
    expect(root.querySelector("[data-testid=tile-etcd]")?.textContent).toContain("3 / 3");
    expect(root.querySelector("[data-testid=tile-apiservers]")?.textContent).toContain("3 / 3");
    expect(root.querySelector("[data-testid=tile-skew]")?.textContent).toContain("None");
    expect(root.querySelector("[data-testid=tile-certificates]")?.textContent).toContain("Not recorded");
    expect(root.textContent).toContain("does not record the expiry of Talos API CA");
    expect(root.querySelector("[data-testid=recent-events]")?.textContent).toContain("applied the configuration");
    expect(root.querySelectorAll(".bg-destructive\\/12")).toHaveLength(0);
  });

  it("of a broken cluster lists exactly the backend's items, errors first, and the broken control plane", async () => {
    const broken: GetClusterHealthResponse = {
      ...healthy,
      etcd: { ...healthy.etcd, healthy: 1, hasQuorum: false },
      controlPlanes: [
        { machine: "cp-1", apiServerReady: true, etcdHealthy: true, etcdMessage: "leader" },
        { machine: "cp-2", apiServerReady: false, apiServerMessage: "does not answer (connection refused)", etcdHealthy: false, etcdMessage: "timed out" },
        { machine: "cp-3", apiServerReady: true, etcdHealthy: false, etcdMessage: "timed out" },
      ],
    };
    await showOverview(overviewConsole({ items: items.slice(0, 2) }, broken));
    expect(rows().map((li) => li.dataset.key)).toEqual(["TalosMachine/w-1/NodeHealthy", "TalosOperation/cfg-1"]);
    expect(rows().every((li) => li.dataset.severity === "Error")).toBe(true);
    expect(root.querySelector("[data-testid=tile-etcd]")?.textContent).toContain("1 / 3");
    expect(root.querySelector("[data-testid=tile-etcd]")?.textContent).toContain("problem");
    expect(root.querySelector("[data-testid=tile-apiservers]")?.textContent).toContain("2 / 3");
    const cp2 = root.querySelector("[data-cp=cp-2]");
    expect(cp2?.textContent).toContain("not ready");
    expect(cp2?.textContent).toContain("connection refused");
  });
});
