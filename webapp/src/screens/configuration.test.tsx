// @vitest-environment happy-dom
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, ConfigPatch, CreatePatchRequest, ListPatchesResponse, PreviewPatchRequest, PreviewPatchResponse } from "../api/generated";
import { ConsoleContext, type Console } from "../context";
import { ConfigurationPage } from "./configuration";
import { loadSchema } from "../lib/configform";
import { settleUntil } from "../testing/dom";

// The schema is a chunk of its own; load it once so that each render finds it.
beforeAll(async () => {
  await loadSchema();
});

const tuning: ConfigPatch = {
  name: "tuning",
  layer: "cluster",
  documentsJson: JSON.stringify([{ sysctlConfig: { params: { "vm.swappiness": "10" } } }]),
  resourceVersion: "7",
  matchedMachines: 2,
};
const roots: ConfigPatch = {
  name: "roots",
  layer: "role",
  targetRole: "worker",
  documentsJson: JSON.stringify([{ trustedRootsConfig: { name: "corp" } }]),
  privilegedPaths: ["TrustedRootsConfig"],
};

const impact: PreviewPatchResponse = {
  valid: true,
  allowed: true,
  machines: [
    { machine: "cp-1", role: "controlplane", mode: "no-reboot", changes: [{ path: 'SysctlConfig:params["net.core.somaxconn"]', op: "added", class: "NoReboot" }] },
    { machine: "w-1", role: "worker", mode: "no-reboot", changes: [{ path: 'SysctlConfig:params["net.core.somaxconn"]', op: "added", class: "NoReboot" }] },
  ],
};

/** A console whose client answers the page's calls and records the writes. */
function consoleOf(list: ListPatchesResponse) {
  const previews: PreviewPatchRequest[] = [];
  const creates: CreatePatchRequest[] = [];
  const c = {
    listPatches: () => Promise.resolve(list),
    previewPatch: ({ body }: { body: PreviewPatchRequest }) => {
      previews.push(body);
      return Promise.resolve(impact);
    },
    createPatch: ({ body }: { body: CreatePatchRequest }) => {
      creates.push(body);
      return Promise.resolve({ patch: body.patch });
    },
  };
  const value = { client: c as unknown as Client, machines: [{ name: "cp-1" }, { name: "w-1" }], canWrite: list.canWrite } as unknown as Console;
  return { value, previews, creates };
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

async function settle() {
  for (let i = 0; i < 10; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

async function show(value: Console, edit?: string) {
  await act(() => {
    render(
      <ConsoleContext.Provider value={value}>
        <ConfigurationPage edit={edit} />
      </ConsoleContext.Provider>,
      root,
    );
  });
  // The schema is loaded by a dynamic import, which the event loop alone
  // does not finish on a busy machine.
  await settleUntil(() => !root.querySelector("[data-loading]"), "the configuration page to load");
}

const q = <T extends Element = HTMLElement>(sel: string) => root.querySelector<T>(sel);
const text = () => root.textContent ?? "";

async function change(sel: string, value: string) {
  const el = q<HTMLInputElement | HTMLSelectElement>(sel);
  expect(el, sel).not.toBeNull();
  await act(() => {
    el!.value = value;
    el!.dispatchEvent(new Event("input", { bubbles: true }));
    el!.dispatchEvent(new Event("change", { bubbles: true }));
  });
  await settle();
}

async function click(sel: string) {
  const el = q<HTMLElement>(sel);
  expect(el, sel).not.toBeNull();
  await act(() => el!.click());
  await settle();
}

describe("ConfigurationPage", () => {
  it("lists the patches by layer with target and documents; a viewer gets no edit controls", async () => {
    const { value } = consoleOf({ patches: [tuning, roots], canWrite: false, canWritePrivileged: false });
    await show(value);
    expect(q("table[aria-label='cluster layer patches'] tr[data-patch=tuning]")?.textContent).toContain("SysctlConfig");
    expect(q("table[aria-label='role layer patches'] tr[data-patch=roots]")?.textContent).toContain("role worker");
    expect(q("tr[data-patch=roots]")?.textContent).toContain("privileged");
    expect(text()).not.toContain("New patch");
    expect(q("[data-testid^=delete-]")).toBeNull();
    expect(q("[data-testid=config-viewer]")).not.toBeNull();
    // The patch opens read-only: no save, no add, the controls disabled.
    render(null, root);
    await show(value, "tuning");
    expect(q("[data-testid=patch-save]")).toBeNull();
    expect(q("[data-testid=add-document]")).toBeNull();
    expect(q<HTMLInputElement>("input[id^=doc0-]")?.disabled).toBe(true);
  });

  it("offers an operator the writes, but neither privileged kinds nor the privileged patch", async () => {
    const { value } = consoleOf({ patches: [tuning, roots], canWrite: true, canWritePrivileged: false });
    await show(value);
    expect(text()).toContain("New patch");
    expect(q("[data-testid=delete-tuning]")).not.toBeNull();
    expect(q("[data-testid=delete-roots]")).toBeNull();
    render(null, root);
    await show(value, "");
    const kinds = [...root.querySelectorAll<HTMLOptionElement>("#add-kind option")].map((o) => o.value);
    expect(kinds).toContain("SysctlConfig");
    expect(kinds).not.toContain("TrustedRootsConfig");
    render(null, root);
    await show(value, "roots");
    expect(text()).toContain("Privileged patch");
    expect(q("[data-testid=patch-save]")).toBeNull();
  });

  it("creates a patch through the generated form, after a preview that names machines and modes", async () => {
    const { value, previews, creates } = consoleOf({ patches: [], canWrite: true, canWritePrivileged: false });
    await show(value, "");
    await change("#patch-name", "net");
    await change("#add-kind", "SysctlConfig");
    await click("[data-testid=add-document]");
    expect(q("[data-document=SysctlConfig]")).not.toBeNull();
    await change("#doc0-params-new", "net.core.somaxconn");
    await click("[data-testid='add-SysctlConfig:params']");
    await change("#doc0-params-net_core_somaxconn", "1024");
    expect(q<HTMLButtonElement>("[data-testid=patch-save]")?.disabled).toBe(true);
    await click("[data-testid=patch-preview]");
    expect(previews.length).toBe(1);
    expect(JSON.parse(previews[0].patch!.documentsJson!)).toEqual([{ sysctlConfig: { params: { "net.core.somaxconn": "1024" } } }]);
    const rows = [...root.querySelectorAll("[data-testid=impact] tr[data-machine]")].map((r) => `${r.getAttribute("data-machine")}:${r.querySelector("[data-mode]")?.getAttribute("data-mode")}`);
    expect(rows).toEqual(["cp-1:no-reboot", "w-1:no-reboot"]);
    expect(q<HTMLButtonElement>("[data-testid=patch-save]")?.disabled).toBe(false);
    await click("[data-testid=patch-save]");
    expect(creates.length).toBe(1);
    expect(creates[0].patch).toMatchObject({ name: "net", layer: "cluster", priority: 0 });
  });
});
