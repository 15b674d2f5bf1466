import type { Machine, RolloutMachine } from "../api/generated";
import * as api from "../api/v1alpha1";
import { condition } from "./status";

/** Conditions of a machine whose change waits for a config rollout (the Apply button shows for them). */
const waitingConditions = [api.RebootRequiredCondition, api.APIServerRestartRequiredCondition];

/**
 * waitsForRollout reports whether an approved machine reports a change that
 * only a config rollout applies. The backend plans the rollout
 * (PreviewConfigRollout, contracts/pkg/rollout); this only decides whether to
 * offer it.
 */
export function waitsForRollout(machines: Machine[]): boolean {
  return machines.some((m) => m.approval?.state === api.ApprovalApproved && !m.deleting && waitingConditions.some((t) => condition(m.conditions, t)?.status === "True"));
}

/** rolloutText says what the operation does to a machine, per kind of RolloutMachine.rollout. */
export function rolloutText(kind: string): string {
  switch (kind) {
    case "reboot":
      return `${api.RebootRequiredCondition}: cordon, drain, staged apply, reboot, uncordon`;
    case "kube-apiserver-restart":
      return `${api.APIServerRestartRequiredCondition}: apply without reboot, the kube-apiserver restarts (no drain)`;
    case "drift":
      return `${api.DriftedCondition}: the node differs from the render and gets it again`;
  }
  return kind;
}

/** rolloutSummary is the plan's one line, as `ichor config apply` prints it. */
export function rolloutSummary(cluster: string, machines: RolloutMachine[] | undefined, selector?: string): string {
  const n = machines?.length ?? 0;
  return `Config rollout of cluster ${cluster}${selector ? ` matching ${selector}` : ""}: ${n} machine${n === 1 ? "" : "s"}, one at a time, control planes first.`;
}
