// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, PreviewConfigRolloutResponse, StartConfigRolloutRequest, StartConfigRolloutResponse } from "../api/generated";
import { ApiError } from "../api/errors";
import { ConfigRolloutDialog } from "./rollout";
import { rolloutSummary, waitsForRollout } from "../lib/rollout";

/** A client that answers the two calls the dialog makes and records the starts. */
function client(preview: PreviewConfigRolloutResponse | Error, start?: (req: StartConfigRolloutRequest) => StartConfigRolloutResponse | Error) {
  const starts: StartConfigRolloutRequest[] = [];
  const c = {
    previewConfigRollout: () => (preview instanceof Error ? Promise.reject(preview) : Promise.resolve(preview)),
    startConfigRollout: ({ body }: { body: StartConfigRolloutRequest }) => {
      starts.push(body);
      const r = start ? start(body) : new Error("no start expected");
      return r instanceof Error ? Promise.reject(r) : Promise.resolve(r);
    },
  };
  return { c: c as unknown as Client, starts };
}

const plan: PreviewConfigRolloutResponse = {
  cluster: "prod",
  matched: 3,
  machines: [
    { name: "cp-1", role: "controlplane", rollout: ["kube-apiserver-restart", "drift"], driftPaths: ["machine.network.hostname"] },
    { name: "w-1", role: "worker", rollout: ["reboot"], rebootRequiredPaths: ["machine.install.extraKernelArgs"], heldBy: "ichor.maesh.dev/hold-apply" },
  ],
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

/** settle lets the dialog's promises resolve and Preact re-render. */
async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await Promise.resolve();
    });
  }
}

async function show(c: Client, onClose: () => void = () => {}) {
  await act(() => {
    render(<ConfigRolloutDialog client={c} cluster="prod" open={true} onClose={onClose} />, root);
  });
  await settle();
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function type(text: string) {
  const input = q<HTMLInputElement>("#rollout-confirm");
  expect(input).not.toBeNull();
  await act(() => {
    input!.value = text;
    input!.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

async function submit() {
  await act(() => {
    q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
  });
  await settle();
}

describe("ConfigRolloutDialog", () => {
  it("shows the plan in the operation's order with reasons and paths", async () => {
    const { c } = client(plan);
    await show(c);
    const items = [...root.querySelectorAll("[data-machine]")];
    expect(items.map((e) => e.getAttribute("data-machine"))).toEqual(["cp-1", "w-1"]);
    expect(items[0].textContent).toContain("APIServerRestartRequired");
    expect(items[0].textContent).toContain("drifted paths: machine.network.hostname");
    expect(items[1].textContent).toContain("RebootRequired: cordon, drain");
    expect(items[1].textContent).toContain("waiting changes: machine.install.extraKernelArgs");
    expect(items[1].textContent).toContain("held");
    expect(root.textContent).toContain("prod: 2 machines, one at a time, control planes first");
  });

  it("starts only after the cluster's name is typed, then links to the operation", async () => {
    const { c, starts } = client(plan, () => ({ operation: { name: "config-abc12", type: "config", phase: "Pending" } }));
    await show(c);
    const apply = q<HTMLButtonElement>("[data-testid=rollout-apply]")!;
    expect(apply.disabled).toBe(true);
    await type("staging");
    expect(apply.disabled).toBe(true);
    await submit();
    expect(starts).toHaveLength(0);

    await type("prod");
    expect(q<HTMLButtonElement>("[data-testid=rollout-apply]")!.disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ confirmClusterName: "prod" }]);
    const link = q<HTMLAnchorElement>("[data-testid=rollout-started] a");
    expect(link?.getAttribute("href")).toBe("/operations/config-abc12");
    expect(q("[data-testid=rollout-started]")!.textContent).toContain("Started operation config-abc12");
  });

  it("shows the backend's refusal and stays open", async () => {
    const refusal = new ApiError(400, { code: 9, message: "config operation config-old has not finished (phase Running)" }, "");
    const { c, starts } = client(plan, () => refusal);
    await show(c);
    await type("prod");
    await submit();
    expect(starts).toHaveLength(1);
    expect(q("[role=alert]")?.textContent).toContain("config-old has not finished");
    expect(q("[data-testid=rollout-started]")).toBeNull();
  });

  it("offers no start while another config rollout is unfinished, and links to it", async () => {
    const { c } = client({ ...plan, unfinished: { name: "config-old", type: "config", phase: "Paused" } });
    await show(c);
    expect(q<HTMLAnchorElement>("[data-testid=rollout-unfinished]")?.getAttribute("href")).toBe("/operations/config-old");
    expect(root.textContent).toContain("config-old has not finished (Paused)");
    expect(q("#rollout-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=rollout-apply]")!.disabled).toBe(true);
  });

  it("says when nothing waits", async () => {
    const { c } = client({ cluster: "prod", matched: 2, machines: [] });
    await show(c);
    expect(q("[data-testid=rollout-nothing]")).not.toBeNull();
    expect(q("#rollout-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=rollout-apply]")!.disabled).toBe(true);
  });

  it("shows a failed plan", async () => {
    const { c } = client(new ApiError(403, { code: 7, message: "user \"ichor:nobody\" may not list talosmachines" }, ""));
    await show(c);
    expect(q("[data-testid=forbidden]")?.textContent).toContain("ichor:nobody");
    expect(q<HTMLButtonElement>("[data-testid=rollout-apply]")!.disabled).toBe(true);
  });
});

describe("waitsForRollout", () => {
  const cond = (type: string, status = "True") => ({ type, status });
  it("is true for an approved machine with RebootRequired or APIServerRestartRequired", () => {
    expect(waitsForRollout([{ approval: { state: "approved" }, conditions: [cond("RebootRequired")] }])).toBe(true);
    expect(waitsForRollout([{ approval: { state: "approved" }, conditions: [cond("APIServerRestartRequired")] }])).toBe(true);
  });
  it("is false otherwise", () => {
    expect(waitsForRollout([])).toBe(false);
    expect(waitsForRollout([{ approval: { state: "approved" }, conditions: [cond("RebootRequired", "False"), cond("Drifted")] }])).toBe(false);
    expect(waitsForRollout([{ approval: { state: "pending" }, conditions: [cond("RebootRequired")] }])).toBe(false);
    expect(waitsForRollout([{ approval: { state: "approved" }, deleting: true, conditions: [cond("RebootRequired")] }])).toBe(false);
  });
  it("summarizes like the CLI", () => {
    expect(rolloutSummary("prod", [{}], "zone=a")).toBe("Config rollout of cluster prod matching zone=a: 1 machine, one at a time, control planes first.");
  });
});
