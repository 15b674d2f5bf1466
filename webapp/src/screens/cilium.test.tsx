// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, GetCiliumValuesResponse, PreviewCiliumValuesResponse, UpdateCiliumValuesRequest } from "../api/generated";
import { ApiError } from "../api/errors";
import * as api from "../api/v1alpha1";
import { CiliumValues, handoverState } from "./cilium";

const values: GetCiliumValuesResponse = {
  valuesYaml: "debug:\n  enabled: true\n",
  effectiveYaml: "debug:\n  enabled: true\ntunnelProtocol: vxlan\n",
  chartVersion: "v1.20.2",
  applied: false,
  canWrite: true,
  handover: { type: api.CNIHandoverCondition, status: "False", reason: api.CNIHandoverPendingReason, message: "waiting for the Cilium DaemonSet" },
};

const relay = "debug:\n  enabled: true\nhubble:\n  relay:\n    enabled: true\n";
const relayDiff = "--- /dev/null\n+++ b/Deployment kube-system/hubble-relay\n@@ -0,0 +1,3 @@\n+kind: Deployment\n";

/** A client whose preview refuses tunnelProtocol and diffs anything else; the update answers with save. */
function client(save: () => Promise<unknown> = () => Promise.resolve({ changed: true, values })) {
  const updates: UpdateCiliumValuesRequest[] = [];
  const previews: string[] = [];
  const c = {
    getCiliumValues: () => Promise.resolve(values),
    previewCiliumValues: ({ body }: { body: { valuesYaml?: string } }): Promise<PreviewCiliumValuesResponse> => {
      previews.push(body.valuesYaml ?? "");
      if (body.valuesYaml?.includes("tunnelProtocol")) {
        return Promise.resolve({
          chartVersion: "v1.20.2",
          refusals: [{ field: "spec.cni.cilium.values", rule: 'the user layer may not set Ichor-owned keys: "tunnelProtocol"', wayOut: "remove these keys" }],
        });
      }
      return Promise.resolve({ chartVersion: "v1.20.2", objects: [{ object: "Deployment kube-system/hubble-relay", change: "added", diff: relayDiff }], diff: relayDiff });
    },
    updateCiliumValues: ({ body }: { body: UpdateCiliumValuesRequest }) => {
      updates.push(body);
      return save();
    },
  };
  return { c: c as unknown as Client, updates, previews };
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
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function type(value: string) {
  const el = q<HTMLTextAreaElement>("#cilium-values")!;
  await act(async () => {
    el.value = value;
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
}

async function click(sel: string) {
  await act(async () => {
    q<HTMLButtonElement>(sel)!.click();
  });
  await settle();
}

const save = () => q<HTMLButtonElement>("[data-testid=cilium-save]")!;

describe("Cilium page", () => {
  it("shows the hand-over, the chart, the effective values and the layer in a labelled editor", async () => {
    render(<CiliumValues client={client().c} />, root);
    await settle();
    expect(root.textContent).toContain("HandoverPending");
    expect(q("[data-testid=cilium-handover]")?.textContent).toBe("waiting for the Cilium DaemonSet");
    expect(q("[data-testid=cilium-chart]")?.textContent).toBe("Cilium v1.20.2");
    expect(q("[data-testid=cilium-effective]")?.textContent).toContain("tunnelProtocol: vxlan");
    expect(q<HTMLTextAreaElement>("#cilium-values")?.value).toBe(values.valuesYaml);
    expect(q("label[for=cilium-values]")?.textContent).toContain("Cilium Helm values");
    expect(save().disabled).toBe(true);
  });

  it("shows the diff of a preview, enables Save for that text only, and saves the text", async () => {
    const { c, updates, previews } = client();
    render(<CiliumValues client={c} />, root);
    await settle();
    await type(relay);
    expect(save().disabled).toBe(true);
    await click("[data-testid=cilium-preview]");
    expect(previews).toEqual([relay]);
    expect(q("[data-testid=cilium-objects]")?.textContent).toContain("added Deployment kube-system/hubble-relay");
    expect(q("[data-testid=cilium-diff]")?.textContent).toContain("+++ b/Deployment kube-system/hubble-relay");
    expect(save().disabled).toBe(false);

    // A change after the preview needs a new one.
    await type(relay + "# more\n");
    expect(save().disabled).toBe(true);
    await type(relay);
    await click("[data-testid=cilium-preview]");
    await click("[data-testid=cilium-save]");
    expect(updates).toEqual([{ valuesYaml: relay } satisfies UpdateCiliumValuesRequest]);
    expect(q("[data-testid=cilium-saved]")).not.toBeNull();
  });

  it("shows the refusals of a preview and keeps Save off", async () => {
    const { c, updates } = client();
    render(<CiliumValues client={c} />, root);
    await settle();
    await type("tunnelProtocol: geneve\n");
    await click("[data-testid=cilium-preview]");
    expect(q("[data-testid=cilium-refusals]")?.textContent).toContain('"tunnelProtocol"');
    expect(q("[data-testid=cilium-refusals]")?.textContent).toContain("remove these keys");
    expect(q("[data-testid=cilium-diff]")).toBeNull();
    expect(save().disabled).toBe(true);
    expect(updates).toEqual([]);
  });

  it("shows the server's refusal of a save", async () => {
    const refusal = new ApiError(
      403,
      {
        code: 7,
        message: "changing the Cilium values of TalosCluster prod is refused; nothing was changed",
        details: [
          {
            "@type": "type.googleapis.com/ichor.v1.RefusalDetails",
            refusals: [{ field: "spec.cni.cilium.values", rule: "changing Cilium's values needs `update` on `talosclusters/cilium-values`, which the caller does not hold", wayOut: "ask an administrator" }],
          },
        ],
      },
      "",
    );
    const { c, updates } = client(() => Promise.reject(refusal));
    render(<CiliumValues client={c} />, root);
    await settle();
    await type(relay);
    await click("[data-testid=cilium-preview]");
    await click("[data-testid=cilium-save]");
    expect(updates).toHaveLength(1);
    expect(q("[data-testid=refusals]")?.textContent).toContain("`update` on `talosclusters/cilium-values`");
    expect(q("[data-testid=cilium-saved]")).toBeNull();
  });

  it("names the hand-over's state", () => {
    expect(handoverState(undefined).text).toBe("Not reported yet");
    expect(handoverState({ status: "True", reason: api.CNIHandoverDoneReason }).tone).toBe("ok");
    expect(handoverState({ status: "False", reason: api.CNIHandoverFailedReason }).tone).toBe("bad");
  });
});
