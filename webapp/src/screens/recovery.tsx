import { useState } from "preact/hooks";
import type { Cluster } from "../api/generated";
import { useConsole } from "../context";
import { Alert } from "../components/ui/alert";
import { Button } from "../components/ui/button";
import { Dialog } from "../components/ui/dialog";
import { Field, Input } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";

/** The effect of lifting the holds, as the CLI's `ichor restore --confirm` says it. */
export const confirmEffects =
  "The controller then applies each machine's rendered configuration: drifted nodes are changed, and workers that wait in maintenance mode are re-installed.";

/**
 * RecoveryNotice tells everyone, on the Overview, that a full-loss recovery
 * (`ichor restore --recover-cluster`) holds the cluster's machines: the
 * controller reports their drift and applies nothing. Operators and admins
 * get Confirm…, which asks for the cluster's name and lifts the recovery's
 * holds (ConfirmRecovery), as `ichor restore --confirm` does.
 */
export function RecoveryNotice({ cluster }: { cluster: Cluster }) {
  const { client, refreshCluster, canWrite } = useConsole();
  const [open, setOpen] = useState(false);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const holds = cluster.recoveryHolds ?? [];
  if (holds.length === 0) return null;
  const name = cluster.name ?? "";

  async function confirm() {
    setBusy(true);
    setError(null);
    try {
      await client.confirmRecovery({ body: { confirmClusterName: typed.trim() } });
      setOpen(false);
      setTyped("");
      refreshCluster();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Alert tone="warn" title={`Cluster ${name} was recovered from a snapshot: ${holds.length} machine${holds.length === 1 ? " is" : "s are"} held`}>
      <p data-testid="recovery-notice">
        Nothing is applied to the held machines until someone confirms that they match what the snapshot restored. Check each machine's drift on its page, then confirm.
      </p>
      <ul class="mt-1 list-disc pl-5" data-testid="recovery-holds">
        {holds.map((h) => (
          <li key={h.machine}>
            <a class="underline" href={`/nodes/${encodeURIComponent(h.machine ?? "")}`}>
              {h.machine}
            </a>{" "}
            ({h.role}, {h.address}): {h.driftPaths ? `${h.driftPaths} path${h.driftPaths === 1 ? "" : "s"} differ` : "no drift reported"}
            {h.reason ? ` — ${h.reason}` : ""}
          </li>
        ))}
      </ul>
      {canWrite && (
        <div class="mt-2">
          <Button size="sm" onClick={() => setOpen(true)} data-testid="recovery-confirm-open" aria-label={`Confirm the recovery of cluster ${name}…`}>
            Confirm…
          </Button>
        </div>
      )}
      <Dialog open={open} onClose={() => setOpen(false)} title={`Confirm the recovery of cluster ${name}`} description={confirmEffects}>
        <form
          class="flex flex-col gap-3"
          onSubmit={(e) => {
            e.preventDefault();
            void confirm();
          }}
        >
          <Field id="recovery-confirm" label={`Type ${name} to confirm`}>
            <Input id="recovery-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
          </Field>
          <ErrorAlert error={error} what={`Confirming the recovery of cluster ${name}`} />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={() => setOpen(false)}>
              Cancel
            </Button>
            <Button type="submit" disabled={busy || typed.trim() !== name} data-testid="recovery-confirm">
              {busy ? "Confirming…" : "Lift the holds"}
            </Button>
          </div>
        </form>
      </Dialog>
    </Alert>
  );
}
