// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, PreviewKubernetesUpgradeResponse, PreviewTalosUpgradeResponse, StartKubernetesUpgradeRequest, StartTalosUpgradeRequest } from "../api/generated";
import { TalosUpgradeDialog, UpgradeDialog, filterCandidates } from "./talosupgrade";

const base: PreviewTalosUpgradeResponse = {
  cluster: "prod",
  current: "v1.13.2",
  source: "https://factory.talos.dev",
  candidates: [
    { version: "v1.14.1", group: "Recommended" },
    { version: "v1.13.4", group: "Patch", default: true },
    { version: "v1.13.3", group: "Patch" },
    { version: "v1.14.0", group: "Next minor" },
  ],
};

const k8s: PreviewKubernetesUpgradeResponse = {
  cluster: "prod",
  current: "v1.36.3",
  source: "https://ghcr.io",
  candidates: [{ version: "v1.37.2", group: "Recommended" }, { version: "v1.36.4", group: "Patch", default: true }],
};

/** A client whose preview refuses v1.12.0 (a downgrade) and records the starts. */
function client() {
  const starts: StartTalosUpgradeRequest[] = [];
  const k8sStarts: StartKubernetesUpgradeRequest[] = [];
  const checks: string[] = [];
  const c = {
    previewTalosUpgrade: (args?: { version?: string }) => {
      const v = args?.version ?? "";
      if (v) checks.push(v);
      const norm = v && !v.startsWith("v") ? `v${v}` : v;
      const refusals = norm === "v1.12.0" ? [{ field: "spec.talosVersion", rule: "downgrade: talos v1.12.0 is older than the running v1.13.2", wayOut: "choose a newer version" }] : [];
      return Promise.resolve({ ...base, version: norm, refusals });
    },
    startTalosUpgrade: ({ body }: { body: StartTalosUpgradeRequest }) => {
      starts.push(body);
      return Promise.resolve({ from: "v1.13.2", to: body.version });
    },
    previewKubernetesUpgrade: (args?: { version?: string }) => {
      const v = args?.version ?? "";
      if (v) checks.push("k8s:" + v);
      const norm = v && !v.startsWith("v") ? `v${v}` : v;
      const refusals =
        norm === "v1.38.0" ? [{ field: "spec.kubernetesVersion", rule: "kubernetes version skew: kubernetes 1.36.3 to 1.38.0 skips a minor", wayOut: "choose a newer version at most one minor up" }] : [];
      const warnings = norm === "v1.37.2" ? ["Cilium v1.20.2 is not tested on Kubernetes v1.37.2"] : [];
      return Promise.resolve({ ...k8s, version: norm, refusals, warnings });
    },
    startKubernetesUpgrade: ({ body }: { body: StartKubernetesUpgradeRequest }) => {
      k8sStarts.push(body);
      return Promise.resolve({ from: "v1.36.3", to: body.version });
    },
  };
  return { c: c as unknown as Client, starts, checks, k8sStarts };
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

async function settle(ms = 0) {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, ms));
    });
  }
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function type(sel: string, v: string) {
  const el = q<HTMLInputElement>(sel)!;
  await act(() => {
    el.value = v;
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

describe("TalosUpgradeDialog", () => {
  it("groups the candidates, chooses the default, and starts after the server's check and the typed name", async () => {
    const { c, starts } = client();
    await act(() => {
      render(<TalosUpgradeDialog client={c} cluster="prod" open={true} onClose={() => {}} />, root);
    });
    await settle(100);
    const groups = Array.from(root.querySelectorAll("fieldset")).map((f) => f.getAttribute("data-group"));
    expect(groups).toEqual(["Recommended", "Patch", "Next minor"]);
    expect(q<HTMLInputElement>("#talos-upgrade-version")!.value).toBe("v1.13.4");
    expect(q("[data-testid=talos-upgrade-checked]")).not.toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=talos-upgrade-start]")!.disabled).toBe(true);
    await type("#talos-upgrade-confirm", "prod");
    expect(q<HTMLButtonElement>("[data-testid=talos-upgrade-start]")!.disabled).toBe(false);
    await act(() => {
      q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(starts).toEqual([{ version: "v1.13.4", confirmClusterName: "prod" }]);
    expect(q("[data-testid=talos-upgrade-started]")).not.toBeNull();
  });

  it("shows why a typed version is refused and offers no start", async () => {
    const { c, starts, checks } = client();
    await act(() => {
      render(<TalosUpgradeDialog client={c} cluster="prod" open={true} onClose={() => {}} />, root);
    });
    await settle(100);
    await type("#talos-upgrade-version", "1.12.0");
    await settle(100);
    expect(checks).toContain("1.12.0");
    expect(q("[data-testid=talos-upgrade-refusals]")?.textContent).toContain("downgrade");
    expect(q("#talos-upgrade-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=talos-upgrade-start]")!.disabled).toBe(true);
    expect(starts).toEqual([]);
  });
});

describe("UpgradeDialog on Kubernetes", () => {
  it("offers the Kubernetes candidates, shows the server's warnings, and starts a Kubernetes upgrade only", async () => {
    const { c, starts, k8sStarts, checks } = client();
    await act(() => {
      render(<UpgradeDialog client={c} cluster="prod" open={true} initial="kubernetes" onClose={() => {}} />, root);
    });
    await settle(100);
    expect(q("[role=tab][aria-selected=true]")?.textContent).toBe("Kubernetes");
    expect(q<HTMLInputElement>("#kubernetes-upgrade-version")!.value).toBe("v1.36.4");
    // Two minors up is refused with the server's rule.
    await type("#kubernetes-upgrade-version", "1.38.0");
    await settle(100);
    expect(checks).toContain("k8s:1.38.0");
    expect(q("[data-testid=kubernetes-upgrade-refusals]")?.textContent).toContain("skips a minor");
    expect(q<HTMLButtonElement>("[data-testid=kubernetes-upgrade-start]")!.disabled).toBe(true);
    // The recommended next minor: a warning, not a refusal.
    await act(() => {
      q<HTMLInputElement>("input[value='v1.37.2']")!.click();
    });
    await settle(100);
    expect(q("[data-testid=kubernetes-upgrade-warnings]")?.textContent).toContain("not tested");
    await type("#kubernetes-upgrade-confirm", "prod");
    await act(() => {
      q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(k8sStarts).toEqual([{ version: "v1.37.2", confirmClusterName: "prod" }]);
    expect(starts).toEqual([]);
    expect(q("[data-testid=kubernetes-upgrade-started]")).not.toBeNull();
  });

  it("switches between Talos and Kubernetes", async () => {
    const { c } = client();
    await act(() => {
      render(<TalosUpgradeDialog client={c} cluster="prod" open={true} onClose={() => {}} />, root);
    });
    await settle(100);
    expect(q<HTMLInputElement>("#talos-upgrade-version")!.value).toBe("v1.13.4");
    await act(() => {
      q<HTMLButtonElement>("[data-testid=upgrade-kind-kubernetes]")!.click();
    });
    await settle(100);
    expect(q("#talos-upgrade-version")).toBeNull();
    expect(q<HTMLInputElement>("#kubernetes-upgrade-version")!.value).toBe("v1.36.4");
    expect(root.textContent).toContain("Running v1.36.3");
  });
});

describe("filterCandidates", () => {
  it("keeps the versions that contain the search, with or without the v", () => {
    expect(filterCandidates(base.candidates!, "1.14").map((c) => c.version)).toEqual(["v1.14.1", "v1.14.0"]);
    expect(filterCandidates(base.candidates!, "v1.13.3").map((c) => c.version)).toEqual(["v1.13.3"]);
    expect(filterCandidates(base.candidates!, "").length).toBe(4);
  });
});
