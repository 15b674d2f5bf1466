// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import type { Machine } from "../../api/generated";
import * as api from "../../api/v1alpha1";
import { Conditions } from "./conditions";

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

const healthyWorker: Machine = {
  name: "w-1",
  conditions: [
    { type: api.ReadyCondition, status: "True", reason: api.InSyncReason },
    { type: api.IdentityConflictCondition, status: "False" },
    { type: api.DriftedCondition, status: "False" },
    { type: api.RebootRequiredCondition, status: "False" },
    { type: api.APIServerRestartRequiredCondition, status: "False" },
    { type: api.ReconcilingCondition, status: "False" },
    { type: api.StalledCondition, status: "False" },
  ],
};

/** The condition types listed before the fold (the first list, not in <details>). */
function listedOutsideTheFold(): (string | null)[] {
  const first = [...root.querySelectorAll("ul")].find((ul) => !ul.closest("details"));
  return [...(first?.querySelectorAll("li > div > span:first-child") ?? [])].map((e) => e.textContent);
}

describe("Conditions", () => {
  it("folds a healthy worker's conditions and shows no red badge", () => {
    render(<Conditions m={healthyWorker} />, root);
    expect(root.querySelector("details summary")?.textContent).toContain("7 conditions OK");
    expect(root.innerHTML).not.toContain("text-destructive-foreground");
    // Nothing is listed outside the fold.
    expect(listedOutsideTheFold()).toEqual([]);
  });

  it("lists the abnormal ones first, Ready leading, and folds the rest", () => {
    const m: Machine = {
      name: "w-1",
      conditions: [
        { type: api.DriftedCondition, status: "True", reason: api.DriftDetectedReason },
        { type: api.ProvisionedCondition, status: "True" },
        { type: api.ReadyCondition, status: "False", reason: api.DriftDetectedReason },
        { type: api.SecureBootCondition, status: "False" },
      ],
    };
    render(<Conditions m={m} />, root);
    expect(listedOutsideTheFold()).toEqual([api.ReadyCondition, api.DriftedCondition, api.SecureBootCondition]);
    expect(root.querySelector("details summary")?.textContent).toContain("1 condition OK");
  });
});
