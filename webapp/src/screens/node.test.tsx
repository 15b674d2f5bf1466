// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Machine, PreviewRemovalResponse } from "../api/generated";
import * as api from "../api/v1alpha1";
import { ConsoleContext, type Console } from "../context";
import { NodePage } from "./node";

const w1: Machine = { name: "w-1", role: api.RoleWorker, stage: api.StageRunning, approval: { state: api.ApprovalApproved }, conditions: [{ type: api.ReadyCondition, status: "True" }] };

/** A client that answers the removal preview and records the removals. */
function client(preview: PreviewRemovalResponse) {
  const removals: { name: string; body: unknown }[] = [];
  const c = {
    previewRemoval: () => Promise.resolve(preview),
    removeMachine: (req: { name: string; body: unknown }) => {
      removals.push(req);
      return Promise.resolve({});
    },
  };
  return { c: c as unknown as Client, removals };
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
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await Promise.resolve();
    });
  }
}

async function show(c: Client, m: Machine, canWrite: boolean, tab = "summary") {
  const ctx = { client: c, machines: [m], synced: true, canWrite } as unknown as Console;
  await act(() => {
    render(
      <ConsoleContext.Provider value={ctx}>
        <NodePage name={m.name ?? ""} tab={tab} />
      </ConsoleContext.Provider>,
      root,
    );
  });
  await settle();
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function openAndType(name: string) {
  await act(() => q<HTMLButtonElement>("[data-testid=remove-node]")!.click());
  await settle();
  const input = q<HTMLInputElement>("#remove-confirm")!;
  await act(() => {
    input.value = name;
    input.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

async function submit() {
  await act(() => {
    q<HTMLFormElement>("dialog form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
  });
  await settle();
}

describe("NodePage", () => {
  it("opens the tab the address names and falls back to the summary", async () => {
    const { c } = client({ allowed: true });
    await show(c, w1, false, "bogus");
    expect(q("[role=tab][aria-selected=true]")?.id).toBe("tab-summary");
    expect(q("#tab-panel")?.textContent).toContain("Conditions");
  });
  it("offers no removal to a viewer", async () => {
    const { c } = client({ allowed: true });
    await show(c, w1, false);
    expect(q("[data-testid=remove-node]")).toBeNull();
  });
  it("removes the node once its name is typed and the checks allow it, with the options shown", async () => {
    const { c, removals } = client({ allowed: true, effects: ["w-1 leaves the cluster"], steps: ["drain"] });
    await show(c, w1, true);
    await openAndType("w-1");
    expect(q("[data-testid=removal-effects]")?.textContent).toContain("w-1 leaves the cluster");
    expect(q<HTMLButtonElement>("[data-testid=remove-confirm-button]")!.disabled).toBe(false);
    await submit();
    expect(removals).toEqual([{ name: "w-1", body: { reboot: true, force: false } }]);
  });
  it("does not remove it while the checks refuse, nor with the wrong name typed", async () => {
    const { c, removals } = client({ allowed: false, refusals: [{ rule: "the last control plane stays", wayOut: "add a control plane first" }] });
    await show(c, w1, true);
    await openAndType("w-1");
    expect(q("[data-testid=removal-refusals]")?.textContent).toContain("add a control plane first");
    expect(q<HTMLButtonElement>("[data-testid=remove-confirm-button]")!.disabled).toBe(true);
    await submit();
    expect(removals).toEqual([]);

    render(null, root);
    const ok = client({ allowed: true });
    await show(ok.c, w1, true);
    await openAndType("w-2");
    expect(q<HTMLButtonElement>("[data-testid=remove-confirm-button]")!.disabled).toBe(true);
    await submit();
    expect(ok.removals).toEqual([]);
  });
});

describe("NodePage downloads", () => {
  async function showAs(groups: string[], m: Machine) {
    const download = () => Promise.resolve({ blob: new Blob([]), filename: "x" });
    const ctx = { client: client({}).c, machines: [m], synced: true, canWrite: true, me: { username: "ichor:u", groups }, download } as unknown as Console;
    await act(() => {
      render(
        <ConsoleContext.Provider value={ctx}>
          <NodePage name={m.name ?? ""} tab="summary" />
        </ConsoleContext.Provider>,
        root,
      );
    });
    await settle();
  }

  it("offers the admin downloads to admins on a running node, not to operators or viewers", async () => {
    const running = { ...w1, address: "10.0.0.2" };
    await showAs(["ichor:admin"], running);
    expect(q('[data-testid="node-downloads"]')).not.toBeNull();
    await showAs(["ichor:operator"], running);
    expect(q('[data-testid="node-downloads"]')).toBeNull();
    await showAs(["ichor:viewer"], running);
    expect(q('[data-testid="node-downloads"]')).toBeNull();
    await showAs(["ichor:admin"], { ...running, stage: api.StageInstalling });
    expect(q('[data-testid="node-downloads"]')).toBeNull();
  });
});
