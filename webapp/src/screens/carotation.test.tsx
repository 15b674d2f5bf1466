// @vitest-environment happy-dom
import { describe, expect, it, vi } from "vitest";
import { act } from "preact/test-utils";
import type { Client, DownloadRotationCredentialsRequest, Operation, PreviewCARotationResponse, StartCARotationRequest } from "../api/generated";
import { consoleOf, settle, show, type, useRoot } from "../testing/dom";
import { handsOutCredentials, RotateCADialog, RotateKeysDialog, RotationCredentialsCard } from "./carotation";

const plan: PreviewCARotationResponse = {
  cluster: "prod",
  allowed: true,
  steps: ["every node and kube-apiserver accepts the new CAs", "wait until you hold credentials of the new CAs", "the new CAs issue"],
};

function client(p: PreviewCARotationResponse) {
  const previews: unknown[] = [];
  const starts: StartCARotationRequest[] = [];
  const downloads: DownloadRotationCredentialsRequest[] = [];
  const c = {
    previewCARotation: (args: unknown) => {
      previews.push(args);
      return Promise.resolve(p);
    },
    startCARotation: ({ body }: { body: StartCARotationRequest }) => {
      starts.push(body);
      return Promise.resolve({ operation: { name: "prod-rotate-ca-x7k2p" } });
    },
    downloadRotationCredentials: ({ body }: { body: DownloadRotationCredentialsRequest }) => {
      downloads.push(body);
      return Promise.resolve({ talosconfig: btoa("context: prod\n"), kubeconfig: btoa("apiVersion: v1\n"), request: "prod-rotate-ca-x7k2p-credentials-abcde", expiresAt: "2027-12-03T18:00:00Z" });
    },
  };
  return { c: c as unknown as Client, previews, starts, downloads };
}

describe("RotateCADialog", () => {
  const root = useRoot();

  it("shows the stages, asks which CAs and the cluster's name, starts, and opens the operation", async () => {
    history.replaceState(null, "", "/");
    const { c, previews, starts } = client(plan);
    await show(root(), consoleOf(c, ["ichor:admin"]), <RotateCADialog client={c} cluster="prod" open={true} onClose={() => {}} />);
    expect(root().querySelector("[data-testid=rotate-ca-steps]")?.textContent).toContain("wait until you hold credentials of the new CAs");
    const start = () => root().querySelector<HTMLButtonElement>("[data-testid=rotate-ca-start]")!;
    expect(start().disabled).toBe(true);
    await act(() => root().querySelector<HTMLInputElement>("[data-testid=rotate-ca-talos]")!.click());
    await settle();
    expect(previews.at(-1)).toEqual({ talosOnly: true, kubernetesOnly: false, aggregator: false });
    await act(() => root().querySelector<HTMLInputElement>("[data-testid=rotate-ca-extra]")!.click());
    await settle();
    expect(previews.at(-1)).toEqual({ talosOnly: true, kubernetesOnly: false, aggregator: true });
    await type(root(), "#rotate-ca-confirm", "prd");
    expect(start().disabled).toBe(true);
    await type(root(), "#rotate-ca-confirm", "prod");
    expect(start().disabled).toBe(false);
    await act(() => {
      root().querySelector<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(starts).toEqual([{ confirmClusterName: "prod", talosOnly: true, kubernetesOnly: false, aggregator: true }]);
    expect(location.pathname).toBe("/operations/prod-rotate-ca-x7k2p");
  });

  it("shows what refuses a rotation and offers no start", async () => {
    const { c, starts } = client({ ...plan, allowed: false, refusals: [{ field: "spec.type", rule: "you may not rotate-ca", wayOut: "ask an admin" }] });
    await show(root(), consoleOf(c, ["ichor:operator"]), <RotateCADialog client={c} cluster="prod" open={true} onClose={() => {}} />);
    expect(root().querySelector("[data-testid=rotate-ca-refusals]")?.textContent).toContain("you may not rotate-ca");
    expect(root().querySelector("#rotate-ca-confirm")).toBeNull();
    expect(root().querySelector<HTMLButtonElement>("[data-testid=rotate-ca-start]")!.disabled).toBe(true);
    expect(starts).toEqual([]);
  });
});

describe("RotationCredentialsCard", () => {
  const root = useRoot();
  const awaiting: Operation = { name: "prod-rotate-ca-x7k2p", type: "ca-rotation", phase: "AwaitingCredentials", step: "credentials" };

  it("appears while the rotation hands credentials out, and not before or after", () => {
    expect(handsOutCredentials(awaiting)).toBe(true);
    expect(handsOutCredentials({ ...awaiting, phase: "Running", step: "issue" })).toBe(true);
    expect(handsOutCredentials({ ...awaiting, phase: "Running", step: "accept" })).toBe(false);
    expect(handsOutCredentials({ ...awaiting, phase: "Succeeded", step: "", completedAt: "2026-12-03T18:00:00Z" })).toBe(false);
    expect(handsOutCredentials({ ...awaiting, type: "shutdown" })).toBe(false);
  });

  it("downloads the talosconfig and the kubeconfig of the new CAs", async () => {
    const saved: string[] = [];
    const orig = HTMLAnchorElement.prototype.click;
    HTMLAnchorElement.prototype.click = function (this: HTMLAnchorElement) {
      saved.push(this.download);
    };
    URL.createObjectURL = vi.fn(() => "blob:x");
    URL.revokeObjectURL = vi.fn();
    try {
      const { c, downloads } = client(plan);
      await show(root(), consoleOf(c, ["ichor:admin"]), <RotationCredentialsCard op={awaiting} cluster="prod" />);
      expect(root().textContent).toContain("The rotation waits for you");
      await act(() => root().querySelector<HTMLButtonElement>("[data-testid=rotation-credentials-download]")!.click());
      await settle();
      expect(downloads).toEqual([{ operation: "prod-rotate-ca-x7k2p" }]);
      expect(saved).toEqual(["prod-talosconfig", "prod-kubeconfig"]);
      expect(root().querySelector("[data-testid=rotation-credentials-done]")?.textContent).toContain("prod-rotate-ca-x7k2p-credentials-abcde");
    } finally {
      HTMLAnchorElement.prototype.click = orig;
    }
  });
});

describe("RotateKeysDialog", () => {
  const root = useRoot();

  it("shows the stages, asks which keys and the cluster's name, starts, and opens the operation", async () => {
    history.replaceState(null, "", "/");
    const previews: unknown[] = [];
    const starts: unknown[] = [];
    const c = {
      previewKeyRotation: (args: unknown) => {
        previews.push(args);
        return Promise.resolve({ cluster: "prod", allowed: true, steps: ["write every Secret again", "drop the old keys"] });
      },
      startKeyRotation: ({ body }: { body: unknown }) => {
        starts.push(body);
        return Promise.resolve({ operation: { name: "prod-rotate-keys-q8w2d" } });
      },
    } as unknown as Client;
    await show(root(), consoleOf(c, ["ichor:admin"]), <RotateKeysDialog client={c} cluster="prod" open={true} onClose={() => {}} />);
    expect(root().querySelector("[data-testid=rotate-keys-steps]")?.textContent).toContain("write every Secret again");
    expect(previews.at(-1)).toEqual({ serviceAccountOnly: false, secretboxOnly: false });
    const start = () => root().querySelector<HTMLButtonElement>("[data-testid=rotate-keys-start]")!;
    expect(start().disabled).toBe(true);
    await act(() => root().querySelector<HTMLInputElement>("[data-testid=rotate-keys-secretbox]")!.click());
    await settle();
    expect(previews.at(-1)).toEqual({ serviceAccountOnly: false, secretboxOnly: true });
    await type(root(), "#rotate-keys-confirm", "prd");
    expect(start().disabled).toBe(true);
    await type(root(), "#rotate-keys-confirm", "prod");
    expect(start().disabled).toBe(false);
    await act(() => {
      root().querySelector<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(starts).toEqual([{ confirmClusterName: "prod", serviceAccountOnly: false, secretboxOnly: true }]);
    expect(location.pathname).toBe("/operations/prod-rotate-keys-q8w2d");
  });

  it("shows what refuses a rotation and offers no start", async () => {
    const c = {
      previewKeyRotation: () =>
        Promise.resolve({ cluster: "prod", allowed: false, steps: ["x"], refusals: [{ field: "spec.type", rule: "the v1.12 contract's keys stay as they are", wayOut: "none" }] }),
    } as unknown as Client;
    await show(root(), consoleOf(c, ["ichor:admin"]), <RotateKeysDialog client={c} cluster="prod" open={true} onClose={() => {}} />);
    expect(root().querySelector("[data-testid=rotate-keys-refusals]")?.textContent).toContain("stay as they are");
    expect(root().querySelector("#rotate-keys-confirm")).toBeNull();
    expect(root().querySelector<HTMLButtonElement>("[data-testid=rotate-keys-start]")!.disabled).toBe(true);
  });
});
