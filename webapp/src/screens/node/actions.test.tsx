// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Machine, PreviewNodeOperationResponse, StartNodeOperationRequest } from "../../api/generated";
import { ApiError } from "../../api/errors";
import { NodeActionButtons, NodeActionDialog } from "./actions";

const m: Machine = { name: "w-1", role: "worker", approval: { state: "approved" } };

/** A client whose preview answers as the backend would for what is asked, and that records the starts. */
function client(opts: { refuse?: boolean; startError?: Error; singleNode?: boolean } = {}) {
  const previews: { machine?: string; action?: string; wipeMode?: string }[] = [];
  const starts: StartNodeOperationRequest[] = [];
  const c = {
    previewNodeOperation: (args: { machine?: string; action?: string; wipeMode?: string }) => {
      previews.push(args);
      const p: PreviewNodeOperationResponse = {
        machine: args.machine,
        action: args.action,
        wipeMode: args.action === "reset" && args.wipeMode !== "state-ephemeral" ? args.wipeMode : "",
        steps: [`${args.action} the node (once)`],
        confirmName: args.action !== "reboot" || !!opts.singleNode,
        downtime: opts.singleNode ? "cluster prod has a single node: rebooting w-1 stops etcd" : "",
        warnings: opts.singleNode ? ["cluster prod has no etcd backup configured"] : [],
        allowed: !opts.refuse,
        refusals: opts.refuse ? [{ field: "spec.node.action", rule: "w-1 is the last worker", wayOut: "set spec.controlPlane.schedulable: true", overridable: true }] : [],
      };
      return Promise.resolve(p);
    },
    startNodeOperation: ({ body }: { body: StartNodeOperationRequest }) => {
      starts.push(body);
      return opts.startError ? Promise.reject(opts.startError) : Promise.resolve({ operation: { name: "node-reset-abcde" } });
    },
  };
  return { c: c as unknown as Client, previews, starts };
}

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
  history.replaceState(null, "", "/nodes/w-1");
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

async function submit() {
  await act(() => {
    q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
  });
  await settle();
}

async function show(c: Client, action: string, closed = { n: 0 }) {
  await act(() => {
    render(<NodeActionDialog client={c} m={m} action={action} onClose={() => closed.n++} />, root);
  });
  await settle();
}

describe("NodeActionButtons", () => {
  it("offers Reboot…, Shut down… and Reset…, the last two red", async () => {
    const asked: string[] = [];
    await act(() => {
      render(<NodeActionButtons onAction={(a) => asked.push(a)} />, root);
    });
    const buttons = Array.from(root.querySelectorAll("button"));
    expect(buttons.map((b) => b.textContent)).toEqual(["Reboot…", "Shut down…", "Reset…"]);
    expect(buttons.map((b) => b.className.includes("bg-destructive"))).toEqual([false, true, true]);
    await act(() => {
      buttons[2].click();
    });
    expect(asked).toEqual(["reset"]);
  });
});

describe("NodeActionDialog", () => {
  it("reboots without a typed name and opens the operation's page", async () => {
    const { c, starts } = client();
    const closed = { n: 0 };
    await show(c, "reboot", closed);
    expect(q("[data-testid=node-action-steps]")?.textContent).toContain("reboot the node (once)");
    expect(q("#node-action-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=node-action-start]")!.disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ machine: "w-1", action: "reboot", wipeMode: undefined, confirmMachineName: undefined }]);
    expect(closed.n).toBe(1);
    expect(location.pathname).toBe("/operations/node-reset-abcde");
  });

  it("says a single node's reboot means downtime, shows the warnings, and takes the typed name as the consent", async () => {
    const { c, starts } = client({ singleNode: true });
    await show(c, "reboot");
    expect(q("[data-testid=node-action-downtime]")?.textContent).toContain("has a single node");
    expect(q("[data-testid=node-action-warnings]")?.textContent).toContain("no etcd backup configured");
    const start = () => q<HTMLButtonElement>("[data-testid=node-action-start]")!;
    expect(start().disabled).toBe(true);
    await type("#node-action-confirm", "w-1");
    expect(start().disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ machine: "w-1", action: "reboot", wipeMode: undefined, confirmMachineName: "w-1" }]);
  });

  it("resets only with the machine's name typed, in the wipe mode chosen and previewed", async () => {
    const { c, starts, previews } = client();
    await show(c, "reset");
    expect(previews.at(-1)).toEqual({ machine: "w-1", action: "reset", wipeMode: "state-ephemeral" });
    await act(() => {
      q<HTMLInputElement>("[data-testid=wipe-system-disk]")!.click();
    });
    await settle();
    expect(previews.at(-1)).toEqual({ machine: "w-1", action: "reset", wipeMode: "system-disk" });
    const start = () => q<HTMLButtonElement>("[data-testid=node-action-start]")!;
    expect(start().disabled).toBe(true);
    expect(start().className).toContain("bg-destructive");
    await type("#node-action-confirm", "w-2");
    expect(start().disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
    await type("#node-action-confirm", "w-1");
    expect(start().disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ machine: "w-1", action: "reset", wipeMode: "system-disk", confirmMachineName: "w-1" }]);
  });

  it("shows what the checks refuse and offers no start", async () => {
    const { c, starts } = client({ refuse: true });
    await show(c, "shutdown");
    expect(q("[data-testid=node-action-refusals]")?.textContent).toContain("w-1 is the last worker");
    expect(q("[data-testid=node-action-refusals]")?.textContent).toContain("What to do: set spec.controlPlane.schedulable: true");
    expect(q("#node-action-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=node-action-start]")!.disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
  });

  it("shows the backend's refusal of the start and stays open", async () => {
    const err = new ApiError(403, { code: 7, message: "reset of machine w-1 is refused; nothing was changed: needs `reset-node` on `talosoperations`" }, "");
    const { c } = client({ startError: err });
    const closed = { n: 0 };
    await show(c, "reset", closed);
    await type("#node-action-confirm", "w-1");
    await submit();
    expect(q("[role=alert]")?.textContent).toContain("needs `reset-node` on `talosoperations`");
    expect(closed.n).toBe(0);
  });
});
