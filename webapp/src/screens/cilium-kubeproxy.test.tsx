// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, PreviewKubeProxySwitchResponse, StartKubeProxySwitchRequest } from "../api/generated";
import { ApiError } from "../api/errors";
import { KubeProxyCard, consistencyState } from "./cilium";

// The steps as guard.KubeProxySwitchPlan words them for cluster prod, to replaced.
const toReplaced = [
  { step: "kube-proxy-check", action: "the operation takes cluster prod's lock and checks the switch again" },
  {
    step: "kube-proxy-cilium",
    action: "the ichor-cni Job upgrades Cilium's Helm release kube-system/cilium with kubeProxyReplacement: true; Cilium's pods roll (the chart's rolling update)",
  },
  {
    step: "kube-proxy-verify",
    action:
      "Cilium's replacement is verified on every node: the DaemonSet kube-system/cilium has rolled out and the ConfigMap kube-system/cilium-config says kube-proxy-replacement: true",
  },
  { step: "kube-proxy-talos", action: "Talos's machine config turns kube-proxy off (spec.cni.kubeProxy: replaced)" },
  { step: "kube-proxy-cleanup", action: "Talos's kube-proxy DaemonSet, ServiceAccount, ClusterRoleBinding and ConfigMap in kube-system are deleted" },
];

const offered: PreviewKubeProxySwitchResponse = {
  cluster: "prod",
  mode: "enabled",
  target: "replaced",
  steps: toReplaced,
  allowed: true,
  consistent: { type: "KubeProxyConsistent", status: "True", reason: "Consistent", message: "Cilium and Talos agree: kube-proxy enabled" },
};

/**
 * A client whose preview answers card (asked without a mode) or dialog
 * (asked for one), and whose start answers start; it records both.
 */
function client(
  card: PreviewKubeProxySwitchResponse,
  dialog: PreviewKubeProxySwitchResponse = card,
  start: () => Promise<unknown> = () => Promise.resolve({ from: "enabled", to: "replaced" }),
) {
  const previews: (string | undefined)[] = [];
  const starts: StartKubeProxySwitchRequest[] = [];
  const c = {
    previewKubeProxySwitch: (args?: { mode?: string }) => {
      previews.push(args?.mode);
      return Promise.resolve(args?.mode ? dialog : card);
    },
    startKubeProxySwitch: ({ body }: { body: StartKubeProxySwitchRequest }) => {
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
    render(<KubeProxyCard client={c} canWrite={canWrite} />, root);
  });
  await settle();
}

async function openDialog() {
  await act(() => q<HTMLButtonElement>("[data-testid=kube-proxy-open]")!.click());
  await settle();
}

async function submit() {
  await act(() => {
    q<HTMLFormElement>("[data-testid=kube-proxy-dialog]")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
  });
  await settle();
}

const start = () => q<HTMLButtonElement>("[data-testid=kube-proxy-start]")!;

describe("kube-proxy card", () => {
  it("shows the mode and its consistency, and offers the other mode in a labelled card", async () => {
    const { c, previews } = client(offered);
    await show(c);
    expect(previews).toEqual([undefined]);
    expect(q("[data-testid=kube-proxy-mode]")?.textContent).toBe("enabled (Talos runs kube-proxy)");
    expect(q("[data-testid=kube-proxy-consistent]")?.textContent).toBe("Cilium and Talos agree: kube-proxy enabled");
    expect(q("#kube-proxy-title")?.textContent).toContain("Consistent");
    expect(q("section[aria-labelledby=kube-proxy-title]")).not.toBeNull();
    const open = q<HTMLButtonElement>("[data-testid=kube-proxy-open]")!;
    expect(open.textContent).toBe("Switch to replaced");
    expect(open.disabled).toBe(false);
    expect(q("[data-testid=kube-proxy-unfinished]")).toBeNull();
  });

  it("keeps the button off for a viewer and says why", async () => {
    await show(client(offered).c, false);
    expect(q<HTMLButtonElement>("[data-testid=kube-proxy-open]")!.disabled).toBe(true);
    expect(root.textContent).toContain("`update` on `talosclusters`");
  });

  it("links an unfinished switch with its step and offers no other", async () => {
    const running: PreviewKubeProxySwitchResponse = {
      ...offered,
      allowed: false,
      consistent: { type: "KubeProxyConsistent", status: "False", reason: "Mismatch", message: "kube-proxy is enabled but Cilium's kube-proxy-replacement is true" },
      unfinished: [{ name: "prod-kube-proxy-abcde", mode: "replaced", step: "kube-proxy-verify" }],
    };
    await show(client(running).c);
    const u = q("[data-testid=kube-proxy-unfinished]")!;
    expect(u.textContent).toBe("prod-kube-proxy-abcde, step kube-proxy-verify");
    expect(u.querySelector("a")?.getAttribute("href")).toBe("/operations/prod-kube-proxy-abcde");
    expect(root.textContent).toContain("Switching to replaced");
    expect(q("#kube-proxy-title")?.textContent).toContain("Mismatch");
    expect(q("[data-testid=kube-proxy-open]")).toBeNull();
  });

  it("shows the steps in order, starts the switch with the target, and reads the card again", async () => {
    const { c, previews, starts } = client(offered);
    await show(c);
    await openDialog();
    expect(previews).toEqual([undefined, "replaced"]);
    expect(document.getElementById("dialog-title")?.textContent).toBe("Switch kube-proxy to replaced?");
    const steps = [...root.querySelectorAll("[data-testid=kube-proxy-steps] li")].map((li) => li.textContent);
    expect(steps).toEqual(toReplaced.map((s) => `${s.step}: ${s.action}`));
    expect(q("[data-testid=kube-proxy-dialog]")?.textContent).toContain("from enabled to replaced");
    expect(q("[data-testid=kube-proxy-refusals]")).toBeNull();
    expect(start().disabled).toBe(false);
    await submit();
    expect(starts).toEqual([{ mode: "replaced" } satisfies StartKubeProxySwitchRequest]);
    await settle();
    // The controller starts the operation: the page stays, and the card
    // reads the switch again to show it.
    expect(location.pathname).toBe("/cilium");
    expect(previews).toEqual([undefined, "replaced", undefined]);
    expect(q("[data-testid=kube-proxy-dialog]")).toBeNull();
  });

  it("keeps Start off until the preview has answered", async () => {
    let answer: (p: PreviewKubeProxySwitchResponse) => void = () => {};
    const starts: StartKubeProxySwitchRequest[] = [];
    const c = {
      previewKubeProxySwitch: (args?: { mode?: string }) => (args?.mode ? new Promise<PreviewKubeProxySwitchResponse>((r) => (answer = r)) : Promise.resolve(offered)),
      startKubeProxySwitch: ({ body }: { body: StartKubeProxySwitchRequest }) => {
        starts.push(body);
        return Promise.resolve({ from: "enabled", to: "replaced" });
      },
    } as unknown as Client;
    await show(c);
    await openDialog();
    expect(start().disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
    await act(() => answer(offered));
    await settle();
    expect(start().disabled).toBe(false);
  });

  it("shows the preview's refusal and starts nothing", async () => {
    const refused: PreviewKubeProxySwitchResponse = {
      ...offered,
      allowed: false,
      refusals: [
        {
          field: "spec.type",
          rule: "Cilium on cluster prod is not Ichor's Helm release yet (CNIHandover: waiting for the Cilium DaemonSet); kube-proxy is switched only with a Cilium Ichor owns",
          wayOut: "wait until CNIHandover says True",
        },
      ],
    };
    const { c, starts } = client(offered, refused);
    await show(c);
    await openDialog();
    expect(q("[data-testid=kube-proxy-refusals]")?.textContent).toContain("kube-proxy is switched only with a Cilium Ichor owns");
    expect(q("[data-testid=kube-proxy-refusals]")?.textContent).toContain("What to do: wait until CNIHandover says True");
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
        message: "switching kube-proxy on cluster prod to replaced is refused; nothing was changed",
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
    expect(root.textContent).toContain("Switching kube-proxy to replaced was refused; nothing was changed");
    expect(location.pathname).toBe("/cilium");
  });

  it("names the consistency condition's state", () => {
    expect(consistencyState(undefined)).toEqual({ tone: "neutral", text: "Not reported yet" });
    expect(consistencyState({ status: "True", reason: "Consistent" })).toEqual({ tone: "ok", text: "Consistent" });
    expect(consistencyState({ status: "False", reason: "Mismatch" })).toEqual({ tone: "bad", text: "Mismatch" });
  });
});
