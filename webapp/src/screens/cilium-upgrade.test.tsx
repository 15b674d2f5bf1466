// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, PreviewCiliumUpgradeResponse, StartCiliumUpgradeRequest } from "../api/generated";
import { ApiError } from "../api/errors";
import { CiliumUpgradeCard, upgradeOffer } from "./cilium";

const offered: PreviewCiliumUpgradeResponse = {
  cluster: "prod",
  running: "v1.19.3",
  target: "v1.20.2",
  embedded: ["v1.19.3", "v1.20.2"],
  allowed: true,
  warnings: ["Cilium v1.20.2 is not tested on Kubernetes v1.37.2 (newer than the versions its documentation lists); it relies on Kubernetes' backward compatibility"],
};

/**
 * A client whose preview answers card (asked without a version) or dialog
 * (asked for one), and whose start answers start; it records both.
 */
function client(card: PreviewCiliumUpgradeResponse, dialog: PreviewCiliumUpgradeResponse = card, start: () => Promise<unknown> = () => Promise.resolve({ operation: { name: "prod-cni-x7k2p", type: "cni" } })) {
  const previews: (string | undefined)[] = [];
  const starts: StartCiliumUpgradeRequest[] = [];
  const c = {
    previewCiliumUpgrade: (args?: { version?: string }) => {
      previews.push(args?.version);
      return Promise.resolve(args?.version ? dialog : card);
    },
    startCiliumUpgrade: ({ body }: { body: StartCiliumUpgradeRequest }) => {
      starts.push(body);
      return start();
    },
  };
  return { c: c as unknown as Client, previews, starts };
}

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
  history.replaceState(null, "", "/cilium");
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

async function show(c: Client, canWrite = true) {
  await act(() => {
    render(<CiliumUpgradeCard client={c} canWrite={canWrite} />, root);
  });
  await settle();
}

async function openDialog() {
  await act(() => q<HTMLButtonElement>("[data-testid=cilium-upgrade-open]")!.click());
  await settle();
}

async function submit() {
  await act(() => {
    q<HTMLFormElement>("[data-testid=cilium-upgrade-dialog]")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
  });
  await settle();
}

const start = () => q<HTMLButtonElement>("[data-testid=cilium-upgrade-start]")!;

describe("Cilium upgrade card", () => {
  it("shows what runs, the charts carried, and offers the target in a labelled card", async () => {
    const { c, previews } = client(offered);
    await show(c);
    expect(previews).toEqual([undefined]);
    expect(q("[data-testid=cilium-running]")?.textContent).toBe("Cilium v1.19.3");
    expect(q("[data-testid=cilium-embedded]")?.textContent).toBe("v1.19.3, v1.20.2");
    const open = q<HTMLButtonElement>("[data-testid=cilium-upgrade-open]")!;
    expect(open.textContent).toBe("Upgrade Cilium to v1.20.2");
    expect(open.disabled).toBe(false);
    expect(q("section[aria-labelledby=cilium-upgrade-title]")).not.toBeNull();
    expect(q("#cilium-upgrade-title")?.textContent).toBe("Upgrade");
    expect(q("[data-testid=cilium-upgrade-none]")).toBeNull();
  });

  it("keeps the button off for a viewer and says why", async () => {
    await show(client(offered).c, false);
    expect(q<HTMLButtonElement>("[data-testid=cilium-upgrade-open]")!.disabled).toBe(true);
    expect(root.textContent).toContain("`create` on `talosoperations`");
  });

  it("explains the upgrade, shows the warnings, starts it with the target, and opens the operation", async () => {
    const { c, previews, starts } = client(offered);
    await show(c);
    await openDialog();
    expect(previews).toEqual([undefined, "v1.20.2"]);
    const dialog = q("[data-testid=cilium-upgrade-dialog]")!;
    expect(document.getElementById("dialog-title")?.textContent).toBe("Upgrade Cilium to v1.20.2?");
    const explain = q("[data-testid=cilium-upgrade-explain]")?.textContent ?? "";
    expect(explain).toContain("Helm upgrades the release kube-system/cilium from v1.19.3 to the chart v1.20.2");
    expect(explain).toContain("at most one minor");
    expect(explain).toContain("Helm rolls the release back");
    expect(explain).toContain("cluster lock");
    expect(q("[data-testid=cilium-upgrade-warnings]")?.textContent).toContain("not tested on Kubernetes v1.37.2");
    expect(dialog.querySelector("[data-testid=cilium-upgrade-refusals]")).toBeNull();
    expect(start().disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ version: "v1.20.2" } satisfies StartCiliumUpgradeRequest]);
    expect(location.pathname).toBe("/operations/prod-cni-x7k2p");
  });

  it("shows the preview's refusal and starts nothing", async () => {
    const refused: PreviewCiliumUpgradeResponse = {
      ...offered,
      allowed: false,
      warnings: [],
      refusals: [
        {
          field: "spec.type",
          rule: "Cilium on cluster prod is not Ichor's Helm release yet (CNIHandover: waiting for the Cilium DaemonSet); only the release Ichor owns is upgraded",
          wayOut: "wait until CNIHandover says True",
        },
      ],
    };
    const { c, starts } = client(offered, refused);
    await show(c);
    await openDialog();
    expect(q("[data-testid=cilium-upgrade-refusals]")?.textContent).toContain("is not Ichor's Helm release yet");
    expect(q("[data-testid=cilium-upgrade-refusals]")?.textContent).toContain("What to do: wait until CNIHandover says True");
    expect(start().disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
    expect(location.pathname).toBe("/cilium");
  });

  it("shows the server's refusal of the start and stays on the page", async () => {
    const refusal = new ApiError(
      400,
      {
        code: 9,
        message: "upgrading the Cilium of cluster prod to v1.20.2 is refused; nothing was changed",
        details: [
          {
            "@type": "type.googleapis.com/ichor.v1.RefusalDetails",
            refusals: [{ field: "spec.type", rule: "operation prod-cni-abcde changes cluster prod's Cilium and has not finished", wayOut: "wait for it" }],
          },
        ],
      },
      "",
    );
    const { c, starts } = client(offered, offered, () => Promise.reject(refusal));
    await show(c);
    await openDialog();
    await submit();
    expect(starts).toHaveLength(1);
    expect(q("[data-testid=refusals]")?.textContent).toContain("operation prod-cni-abcde changes cluster prod's Cilium and has not finished");
    expect(root.textContent).toContain("Upgrading Cilium to v1.20.2 was refused; nothing was changed");
    expect(location.pathname).toBe("/cilium");
  });

  it("says so when no newer chart is carried, with no button", async () => {
    const { c } = client({ cluster: "prod", running: "v1.20.2", target: "", embedded: ["v1.19.3", "v1.20.2"], allowed: false });
    await show(c);
    expect(q("[data-testid=cilium-upgrade-none]")?.textContent).toBe("Cilium v1.20.2 is the newest chart this Ichor carries.");
    expect(q("[data-testid=cilium-upgrade-open]")).toBeNull();
  });

  it("names why nothing is offered", () => {
    expect(upgradeOffer({ running: "", embedded: ["v1.19.3", "v1.20.2"] })).toEqual({ none: expect.stringContaining("not known yet") });
    expect(upgradeOffer({ running: "v1.21.0", embedded: ["v1.19.3", "v1.20.2"] })).toEqual({ none: expect.stringContaining("carries no chart Cilium v1.21.0 can move to") });
    expect(upgradeOffer({ running: "v1.19.3", target: "v1.20.2" })).toEqual({ target: "v1.20.2" });
  });
});
