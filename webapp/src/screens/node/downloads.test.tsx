// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Machine } from "../../api/generated";
import { ApiError } from "../../api/errors";
import type { Downloader } from "../../lib/download";
import { EtcdSnapshotDownload, NodeDownloads, offersDownloads, snapshotSource, TalosconfigDownload } from "./downloads";
import { downloadPath } from "../../lib/download";

const cp: Machine = { name: "cp-1", role: "controlplane", stage: "running", address: "10.0.0.1" };
const worker: Machine = { name: "w-1", role: "worker", stage: "running", address: "10.0.0.2" };

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
  URL.createObjectURL = vi.fn(() => "blob:x");
  URL.revokeObjectURL = vi.fn();
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

function recorder(fail?: Error) {
  const asked: { kind: string; node: string; query?: Record<string, string> }[] = [];
  const d: Downloader = async (kind, node, query) => {
    asked.push({ kind, node, query });
    if (fail) throw fail;
    return { blob: new Blob(["x"]), filename: `${node}-${kind}.bin` };
  };
  return { d, asked };
}

describe("offersDownloads", () => {
  it("offers them to an admin on a running node only", () => {
    const { d } = recorder();
    expect(offersDownloads(cp, true, d)).toBe(true);
    expect(offersDownloads(cp, false, d)).toBe(false);
    expect(offersDownloads({ ...cp, stage: "installing" }, true, d)).toBe(false);
    expect(offersDownloads(cp, true, undefined)).toBe(false);
  });
});

describe("NodeDownloads", () => {
  it("downloads a support bundle and a bounded capture, and offers the etcd snapshot on control planes only", async () => {
    const { d, asked } = recorder();
    render(<NodeDownloads m={worker} download={d} />, root);
    expect(root.querySelector('[data-testid="download-etcd-snapshot"]')).toBeNull();
    // Each capture field is named by its label (axe's "label" rule in the browser test).
    for (const [id, label] of [["capture-interface", "Interface"], ["capture-seconds", "Seconds"]]) {
      expect(root.querySelector(`label[for="${id}"]`)?.textContent).toBe(label);
      expect(root.querySelector(`#${id}`)?.tagName).toBe("INPUT");
    }
    const capture = root.querySelector<HTMLButtonElement>('[data-testid="download-packet-capture"]')!;
    expect(capture.disabled).toBe(true);

    await act(async () => root.querySelector<HTMLButtonElement>('[data-testid="download-support-bundle"]')!.click());
    await settle();
    expect(asked[0]).toEqual({ kind: "support-bundle", node: "w-1", query: undefined });
    expect(root.querySelector('[data-testid="download-done"]')?.textContent).toContain("w-1-support-bundle.bin");

    const iface = root.querySelector<HTMLInputElement>('[data-testid="capture-interface"]')!;
    await act(async () => {
      iface.value = "a/b";
      iface.dispatchEvent(new Event("input"));
    });
    expect(root.querySelector('[data-testid="capture-problem"]')?.textContent).toMatch(/not a network interface name/);
    expect(capture.disabled).toBe(true);

    await act(async () => {
      iface.value = "eth0";
      iface.dispatchEvent(new Event("input"));
    });
    expect(capture.disabled).toBe(false);
    await act(async () => capture.click());
    await settle();
    expect(asked[1]).toEqual({ kind: "packet-capture", node: "w-1", query: { interface: "eth0", duration: "10s" } });

    render(<NodeDownloads m={cp} download={d} />, root);
    expect(root.querySelector('[data-testid="download-etcd-snapshot"]')).not.toBeNull();
  });

  it("shows the backend's refusal", async () => {
    const { d } = recorder(new ApiError(403, { code: 7, message: 'user "ichor:olivia" may not download talosclusters/support-bundle' }, "403 Forbidden"));
    render(<NodeDownloads m={worker} download={d} />, root);
    await act(async () => root.querySelector<HTMLButtonElement>('[data-testid="download-support-bundle"]')!.click());
    await settle();
    expect(root.textContent).toMatch(/may not download talosclusters\/support-bundle/);
    expect(root.querySelector('[data-testid="download-done"]')).toBeNull();
  });
});

describe("EtcdSnapshotDownload", () => {
  it("downloads from the first running control plane", async () => {
    expect(snapshotSource([worker, { ...cp, name: "cp-2" }, cp])?.name).toBe("cp-1");
    expect(snapshotSource([worker])).toBeUndefined();
    const { d, asked } = recorder();
    render(<EtcdSnapshotDownload machines={[worker, cp]} download={d} />, root);
    await act(async () => root.querySelector<HTMLButtonElement>('[data-testid="download-etcd-snapshot"]')!.click());
    await settle();
    expect(asked).toEqual([{ kind: "etcd-snapshot", node: "cp-1", query: undefined }]);
  });

  it("is disabled without a running control plane", () => {
    const { d } = recorder();
    render(<EtcdSnapshotDownload machines={[worker]} download={d} />, root);
    expect(root.querySelector<HTMLButtonElement>('[data-testid="download-etcd-snapshot"]')!.disabled).toBe(true);
  });
});

describe("TalosconfigDownload", () => {
  it("asks for the chosen hours at the cluster's talosconfig route and saves the file", async () => {
    const { d, asked } = recorder();
    render(<TalosconfigDownload download={d} />, root);
    expect(root.querySelector('label[for="talosconfig-hours"]')?.textContent).toBe("Valid for");
    const sel = root.querySelector<HTMLSelectElement>('[data-testid="talosconfig-hours"]')!;
    expect([...sel.options].map((o) => o.value)).toEqual(["1", "4", "8", "12"]);
    await act(() => {
      sel.value = "8";
      sel.dispatchEvent(new Event("change"));
    });
    await act(() => root.querySelector<HTMLButtonElement>('[data-testid="download-talosconfig"]')!.click());
    await settle();
    expect(asked).toEqual([{ kind: "talosconfig", node: "", query: { duration: "8h" } }]);
    expect(root.querySelector('[data-testid="download-done"]')?.textContent).toContain("-talosconfig.bin");
    expect(downloadPath("talosconfig", "")).toBe("/api/v1/cluster/talosconfig");
  });

  it("shows the backend's refusal", async () => {
    const { d } = recorder(new ApiError(403, { code: 7, message: "downloading a reader talosconfig of cluster prod: ichor:vera may not download talosclusters/talosconfig-reader" }, "403 Forbidden"));
    render(<TalosconfigDownload download={d} />, root);
    await act(() => root.querySelector<HTMLButtonElement>('[data-testid="download-talosconfig"]')!.click());
    await settle();
    expect(root.textContent).toContain("may not download talosclusters/talosconfig-reader");
    expect(root.querySelector('[data-testid="download-done"]')).toBeNull();
  });
});
