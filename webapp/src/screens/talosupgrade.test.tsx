// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, PreviewTalosUpgradeResponse, StartTalosUpgradeRequest } from "../api/generated";
import { TalosUpgradeDialog, filterCandidates } from "./talosupgrade";

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

/** A client whose preview refuses v1.12.0 (a downgrade) and records the starts. */
function client() {
  const starts: StartTalosUpgradeRequest[] = [];
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
  };
  return { c: c as unknown as Client, starts, checks };
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

describe("filterCandidates", () => {
  it("keeps the versions that contain the search, with or without the v", () => {
    expect(filterCandidates(base.candidates!, "1.14").map((c) => c.version)).toEqual(["v1.14.1", "v1.14.0"]);
    expect(filterCandidates(base.candidates!, "v1.13.3").map((c) => c.version)).toEqual(["v1.13.3"]);
    expect(filterCandidates(base.candidates!, "").length).toBe(4);
  });
});
