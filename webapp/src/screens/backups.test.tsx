// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Backup, BackupServiceStartRestoreBody, Client, PreviewRestoreResponse, Snapshot } from "../api/generated";
import { RestoreDialog, backupState, backupSummary } from "./backups";

const snapshot: Snapshot = {
  name: "nightly/default/prod/snapshots/20261201T030000Z-r42.db.age",
  shortName: "20261201T030000Z-r42.db.age",
  takenAt: "2026-12-01T03:00:00Z",
  etcdRevision: "42",
  sizeBytes: "4194304",
  node: "cp-1",
};
const backup: Backup = { name: "nightly", snapshots: [snapshot] };

/** A client whose preview refuses the Secret "missing" and records the starts. */
function client() {
  const starts: BackupServiceStartRestoreBody[] = [];
  const previews: (string | undefined)[] = [];
  const c = {
    previewRestore: (args: { name: string; snapshot?: string; identitySecret?: string }): Promise<PreviewRestoreResponse> => {
      previews.push(args.identitySecret);
      const refusals =
        args.identitySecret === "busy"
          ? [{ field: "spec.type", rule: "the cluster lock of prod is held by ichor-controller/operation/default/upgrade-1", wayOut: "wait until that work ends" }]
          : [];
      return Promise.resolve({ cluster: "prod", snapshot, steps: ["download", "marker", "reset", "upload", "rejoin"], refusals });
    },
    startRestore: ({ body }: { name: string; body: BackupServiceStartRestoreBody }) => {
      starts.push(body);
      return Promise.resolve({ operation: { name: "etcd-restore-abcde", type: "etcd-restore" } });
    },
  };
  return { c: c as unknown as Client, starts, previews };
}

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function settle(ms = 300) {
  for (let i = 0; i < 3; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, ms));
    });
  }
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function type(sel: string, value: string) {
  const el = q<HTMLInputElement>(sel)!;
  await act(async () => {
    el.value = value;
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

describe("RestoreDialog", () => {
  it("shows the steps, keeps Restore off until the cluster's name is typed, and starts the restore with the snapshot and the identity Secret", async () => {
    const { c, starts } = client();
    render(<RestoreDialog client={c} cluster="prod" backup={backup} snapshot={snapshot} onClose={() => {}} />, root);
    await settle();
    expect(q("[data-testid=restore-steps]")?.textContent).toContain("reset");
    const start = () => q<HTMLButtonElement>("[data-testid=restore-start]")!;
    expect(start().disabled).toBe(true);
    await type("#restore-confirm", "staging");
    expect(start().disabled).toBe(true);
    await type("#restore-confirm", "prod");
    expect(start().disabled).toBe(false);
    await act(async () => {
      start().form!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle(0);
    expect(starts).toEqual([{ snapshot: snapshot.name, identitySecret: "restore-identity", confirmClusterName: "prod" }]);
    expect(q("[data-testid=restore-started]")?.textContent).toContain("etcd-restore-abcde");
  });

  it("shows what refuses the restore and offers no confirmation", async () => {
    const { c, starts, previews } = client();
    render(<RestoreDialog client={c} cluster="prod" backup={backup} snapshot={snapshot} onClose={() => {}} />, root);
    await settle();
    await type("#restore-identity", "busy");
    await settle();
    expect(previews).toContain("busy");
    expect(q("[data-testid=restore-refusals]")?.textContent).toContain("held by ichor-controller/operation/default/upgrade-1");
    expect(q("#restore-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=restore-start]")!.disabled).toBe(true);
    expect(starts).toEqual([]);
  });
});

describe("backupState", () => {
  it("is stale, failing, empty, in-cluster or ready", () => {
    expect(backupState({ conditions: [{ type: "Stale", status: "True" }] }).text).toBe("Stale");
    expect(backupState({ conditions: [{ type: "Ready", status: "False", reason: "UploadFailed" }] })).toEqual({ tone: "bad", text: "UploadFailed" });
    expect(backupState({}).text).toBe("No snapshot yet");
    expect(backupState({ lastSuccess: "2026-12-01T03:00:00Z", storeInCluster: "x" }).tone).toBe("warn");
    expect(backupState({ lastSuccess: "2026-12-01T03:00:00Z" })).toEqual({ tone: "ok", text: "Ready" });
  });
});

describe("backupSummary", () => {
  it("says when etcd is not backed up, the newest snapshot's age, and which backups need a look", () => {
    expect(backupSummary([])).toEqual({ value: "None", detail: "No TalosEtcdBackup: etcd is not backed up" });
    expect(backupSummary([{ name: "a" }]).value).toBe("No snapshot");
    const recent = new Date(Date.now() - 2 * 3600 * 1000).toISOString();
    const old = new Date(Date.now() - 3 * 86400 * 1000).toISOString();
    const s = backupSummary([
      { name: "a", lastSuccess: old, conditions: [{ type: "Stale", status: "True" }] },
      { name: "b", lastSuccess: recent },
    ]);
    expect(s.value).toBe("2h ago");
    expect(s.detail).toBe("2 backups · a: Stale");
    expect(backupSummary([{ name: "b", lastSuccess: recent }]).detail).toBe("1 backup, all fine");
  });
});
