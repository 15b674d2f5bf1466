import type { Machine, PreviewClusterShutdownResponse, PreviewNodeOperationResponse } from "../api/generated";
import * as api from "../api/v1alpha1";
import { canRemove } from "./node";

/** A node action the node page offers, with the button's label and the dialog's verb. */
export interface NodeAction {
  action: string;
  label: string;
  verb: string;
  /** destructive actions (shutdown, reset) get the red button and need the machine's name typed. */
  destructive: boolean;
}

/** The node actions, in the order the page offers them (contracts/pkg/nodeop.Actions). */
export const nodeActions: NodeAction[] = [
  { action: api.NodeActionReboot, label: "Reboot…", verb: "Reboot", destructive: false },
  { action: api.NodeActionShutdown, label: "Shut down…", verb: "Shut down", destructive: true },
  { action: api.NodeActionReset, label: "Reset…", verb: "Reset", destructive: true },
];

/** The wipe modes of a reset, the default first (spec.node.wipeMode), with what each wipes. */
export const wipeModes: { mode: string; label: string }[] = [
  { mode: "state-ephemeral", label: "STATE and EPHEMERAL (the machine is installed again from maintenance mode)" },
  { mode: "system-disk", label: "The whole system disk (the node must boot its install media again)" },
  { mode: "all", label: "The system disk and every user disk" },
];

/** offersNodeActions reports whether the node page offers its actions: a writer, an approved machine, not being deleted (the backend still checks). */
export function offersNodeActions(m: Machine, canWrite: boolean): boolean {
  return canRemove(m, canWrite);
}

/** nodeActionOf is the action named a, or undefined. */
export function nodeActionOf(a: string): NodeAction | undefined {
  return nodeActions.find((x) => x.action === a);
}

/**
 * canStartNodeOperation reports whether the dialog's button starts the
 * operation: the preview of exactly what is asked came back allowed and,
 * for a shutdown or a reset, the machine's name is typed. The backend checks
 * all of it again.
 */
export function canStartNodeOperation(p: PreviewNodeOperationResponse | null, asked: { action: string; wipeMode: string }, typed: string, name: string): boolean {
  if (!p || !p.allowed || p.action !== asked.action) return false;
  if (asked.action === api.NodeActionReset && (p.wipeMode || "state-ephemeral") !== (asked.wipeMode || "state-ephemeral")) return false;
  return !p.confirmName || typed.trim() === name;
}

/** canStartShutdown reports whether the shutdown dialog's button starts it: allowed, no shutdown unfinished, and the cluster's name typed. */
export function canStartShutdown(p: PreviewClusterShutdownResponse | null, typed: string): boolean {
  return !!p && !!p.allowed && !p.unfinished && !!p.cluster && typed.trim() === p.cluster;
}
