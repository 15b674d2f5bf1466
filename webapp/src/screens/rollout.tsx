import { useEffect, useState } from "preact/hooks";
import type { Client, Operation, PreviewConfigRolloutResponse, RolloutMachine } from "../api/generated";
import { Dialog } from "../components/ui/dialog";
import { Button, LinkButton } from "../components/ui/button";
import { Field, Input } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { ErrorAlert } from "../components/errors";
import { rolloutSummary, rolloutText } from "../lib/rollout";
import * as api from "../api/v1alpha1";

function operationHref(name: string | undefined): string {
  return `/operations/${encodeURIComponent(name ?? "")}`;
}

/** Plan lists the machines a config rollout would take, why, and the changed paths (never values). */
function Plan({ machines }: { machines: RolloutMachine[] }) {
  return (
    <ol class="max-h-72 list-decimal space-y-2 overflow-y-auto pl-5 text-sm" data-testid="rollout-plan">
      {machines.map((m) => (
        <li key={m.name} data-machine={m.name}>
          <span class="font-medium">{m.name}</span> <span class="text-muted-foreground">({m.role || "unknown"})</span>
          {m.heldBy && (
            <Badge tone="warn" class="ml-1" title={`The operation skips it while it carries ${m.heldBy}`}>
              held
            </Badge>
          )}
          <ul class="mt-0.5 text-muted-foreground">
            {(m.rollout ?? []).map((k) => (
              <li key={k}>{rolloutText(k)}</li>
            ))}
          </ul>
          {!!m.rebootRequiredPaths?.length && (
            <p class="break-all font-mono text-xs">waiting changes: {m.rebootRequiredPaths.join(", ")}</p>
          )}
          {!!m.driftPaths?.length && <p class="break-all font-mono text-xs">drifted paths: {m.driftPaths.join(", ")}</p>}
        </li>
      ))}
    </ol>
  );
}

/**
 * ConfigRolloutDialog shows the plan of a config rollout (PreviewConfigRollout),
 * asks for the cluster's name, and starts it (StartConfigRollout), as
 * `ichor config apply` does; the backend checks again either way.
 */
export function ConfigRolloutDialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const [plan, setPlan] = useState<PreviewConfigRolloutResponse | null>(null);
  const [planError, setPlanError] = useState<unknown>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [started, setStarted] = useState<Operation | null>(null);
  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPlan(null);
    setPlanError(null);
    client.previewConfigRollout({}).then(
      (p) => !stop && setPlan(p),
      (e) => !stop && setPlanError(e),
    );
    return () => {
      stop = true;
    };
  }, [open, client]);
  function close() {
    setTyped("");
    setError(null);
    setStarted(null);
    onClose();
  }
  const machines = plan?.machines ?? [];
  const name = plan?.cluster || cluster;
  const ready = !!plan && machines.length > 0 && !plan.unfinished;
  async function submit(e: Event) {
    e.preventDefault();
    if (!ready || typed.trim() !== name) return;
    setBusy(true);
    setError(null);
    try {
      const r = await client.startConfigRollout({ body: { confirmClusterName: typed.trim() } });
      setStarted(r.operation ?? null);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return (
    <Dialog open={open} onClose={close} title={`Apply configuration to ${name}?`} description={<>The changes that wait for a reboot or a kube-apiserver restart, and drift corrections, go to the nodes one machine at a time, control planes first.</>}>
      {started ? (
        <div class="flex flex-col gap-3" data-testid="rollout-started">
          <Alert title={`Started operation ${started.name}`}>Pause it on its page to stop it after the current step.</Alert>
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Close
            </Button>
            <LinkButton variant="default" href={operationHref(started.name)}>
              Open {started.name}
            </LinkButton>
          </div>
        </div>
      ) : (
        <form onSubmit={submit} class="flex flex-col gap-3">
          <ErrorAlert error={planError} what="Planning the rollout" />
          {!plan && !planError && (
            <p class="text-sm text-muted-foreground" role="status">
              Planning…
            </p>
          )}
          {plan?.unfinished && (
            <Alert tone="warn" title={`Config operation ${plan.unfinished.name} has not finished (${plan.unfinished.phase || api.OperationPending})`}>
              Follow or resume it instead of starting another:{" "}
              <a class="underline" href={operationHref(plan.unfinished.name)} data-testid="rollout-unfinished">
                open {plan.unfinished.name}
              </a>
              .
            </Alert>
          )}
          {plan && machines.length === 0 && (
            <p class="text-sm" data-testid="rollout-nothing">
              Nothing needs rolling out: no machine waits for a reboot, a kube-apiserver restart or a drift correction.
            </p>
          )}
          {machines.length > 0 && (
            <>
              <p class="text-sm">{rolloutSummary(name, machines, plan?.selector)}</p>
              <Plan machines={machines} />
            </>
          )}
          {ready && (
            <Field id="rollout-confirm" label={`Type ${name} to confirm`}>
              <Input id="rollout-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          <ErrorAlert error={error} what="Starting the rollout" />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Cancel
            </Button>
            <Button type="submit" disabled={!ready || typed.trim() !== name || busy} data-testid="rollout-apply">
              {busy ? "Starting…" : "Apply"}
            </Button>
          </div>
        </form>
      )}
    </Dialog>
  );
}
