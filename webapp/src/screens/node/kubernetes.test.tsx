// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, GetNodeKubernetesResponse, GetNodeResourcesResponse, Machine } from "../../api/generated";
import * as api from "../../api/v1alpha1";
import { Kubernetes } from "./kubernetes";

const m: Machine = { name: "w-1", role: api.RoleWorker, stage: api.StageRunning, nodeName: "w-1", approval: { state: api.ApprovalApproved } };

const kube: GetNodeKubernetesResponse = {
  nodeName: "w-1",
  kubeletVersion: "v1.37.2",
  containerRuntimeVersion: "containerd://2.1.0",
  conditions: [
    { type: "MemoryPressure", status: "False", reason: "KubeletHasSufficientMemory" },
    { type: "Ready", status: "False", reason: "KubeletNotReady", message: "container runtime network not ready" },
  ],
  taints: [{ key: "node.kubernetes.io/not-ready", effect: "NoSchedule" }],
  capacity: [{ name: "cpu", capacity: "4", allocatable: "3800m" }],
  pods: [{ namespace: "kube-system", name: "cilium-abcde", phase: "Pending", ready: "0/1", restarts: 3 }],
  events: [{ type: "Warning", reason: "Rebooted", message: "Node w-1 has been rebooted", count: 2 }],
};
const res: GetNodeResourcesResponse = {
  bootTime: new Date(Date.now() - (2 * 86400 + 3 * 3600) * 1000).toISOString(),
  cpus: 8,
  cpuBusy: 0.2,
  load1: 0.42,
  memoryTotalBytes: String(8 * 2 ** 30),
  memoryAvailableBytes: String(6 * 2 ** 30),
  filesystems: [{ mountPoint: "/var", device: "/dev/nvme0n1p6", sizeBytes: String(100 * 2 ** 30), availableBytes: String(90 * 2 ** 30) }],
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

async function show(c: Partial<Client>) {
  const client = { getNodeEtcdMembers: () => Promise.resolve({}), ...c } as unknown as Client;
  await act(() => {
    render(<Kubernetes m={m} client={client} />, root);
  });
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

describe("the Kubernetes tab", () => {
  it("shows the Node's conditions (problems first, healthy folded), taints, capacity, pods, Events and the node's resources", async () => {
    await show({ getNodeKubernetes: () => Promise.resolve(kube), getNodeResources: () => Promise.resolve(res) });
    const shown = root.querySelector("[data-testid=kube-conditions]")!;
    expect([...shown.querySelectorAll("[data-condition]")].map((c) => (c as HTMLElement).dataset.condition)).toEqual(["Ready"]);
    expect(shown.querySelector(".bg-destructive\\/12")?.textContent).toBe("False");
    expect(root.textContent).toContain("1 condition OK");
    expect(root.querySelector("[data-testid=kube-taints]")?.textContent).toContain("node.kubernetes.io/not-ready:NoSchedule");
    expect(root.textContent).toContain("3800m");
    expect(root.querySelector('[data-pod="kube-system/cilium-abcde"]')?.textContent).toContain("0/1");
    expect(root.querySelector("[data-testid=kube-events]")?.textContent).toContain("Node w-1 has been rebooted");
    const r = root.querySelector("[data-testid=node-resources]")?.textContent ?? "";
    expect(r).toContain("2d 3h");
    expect(r).toContain("8 CPUs, 20% busy");
    expect(r).toContain("2.0 GiB used of 8.0 GiB");
    expect(r).toContain("10.0 GiB used of 100.0 GiB (/dev/nvme0n1p6)");
  });

  it("says what the user's role may not read instead of leaving it blank", async () => {
    await show({
      getNodeKubernetes: () => Promise.resolve({ nodeName: "w-1", unavailable: ["the Node w-1: your role may not read it (ask an administrator for get/list on it)"] }),
      getNodeResources: () => Promise.resolve(res),
    });
    expect(root.querySelector("[data-testid=kube-unavailable]")?.textContent).toContain("your role may not read it");
  });
});
