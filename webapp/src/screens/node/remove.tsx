import { useEffect, useState } from "preact/hooks";
import { useConsole } from "../../context";
import type { Client, Machine, PreviewRemovalResponse } from "../../api/generated";
import { Button } from "../../components/ui/button";
import { Checkbox, Field, Input } from "../../components/ui/input";
import { Dialog } from "../../components/ui/dialog";
import { Alert } from "../../components/ui/alert";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** RemovalPreview shows what the removal would do: the backend's shared plan (steps, effects) and the guard's refusals. */
export function RemovalPreview({ preview, loading, error, name }: { preview: PreviewRemovalResponse | null; loading: boolean; error: unknown; name: string }) {
  if (error) return <ErrorAlert error={error} what={`Previewing the removal of ${name}`} />;
  if (!preview) return <Loading when={loading} />;
  const refusals = preview.refusals ?? [];
  return (
    <div class="flex flex-col gap-3 text-sm" data-testid="removal-preview" data-allowed={preview.allowed ? "true" : "false"} aria-busy={loading}>
      {refusals.length > 0 && (
        <Alert tone="error" title="The checks refuse this removal now">
          <ul class="list-disc space-y-1 pl-5" data-testid="removal-refusals">
            {refusals.map((r, i) => (
              <li key={i}>
                <span class="font-medium">{r.rule}</span>
                {r.field && <span class="text-muted-foreground"> ({r.field})</span>}
                {r.wayOut && <div>What to do: {r.wayOut}</div>}
                {r.overridable && <div class="text-xs text-muted-foreground">An admin with the override verb can let this through with kubectl.</div>}
              </li>
            ))}
          </ul>
        </Alert>
      )}
      <div>
        <p class="font-semibold">Effects</p>
        <ul class="mt-1 list-disc space-y-1 pl-5" data-testid="removal-effects">
          {(preview.effects ?? []).map((e, i) => (
            <li key={i}>{e}</li>
          ))}
        </ul>
      </div>
      <div>
        <p class="font-semibold">Steps</p>
        <ol class="mt-1 list-decimal space-y-1 pl-5 text-muted-foreground" data-testid="removal-steps">
          {(preview.steps ?? []).map((s, i) => (
            <li key={i}>{s}</li>
          ))}
        </ol>
      </div>
    </div>
  );
}

/** useRemovalPreview asks the backend for the removal's plan while the dialog is open, again when an option changes. */
function useRemovalPreview(client: Client, name: string, open: boolean, reboot: boolean, force: boolean) {
  const [state, setState] = useState<{ preview: PreviewRemovalResponse | null; error: unknown; loading: boolean }>({ preview: null, error: null, loading: false });
  useEffect(() => {
    if (!open) {
      setState({ preview: null, error: null, loading: false });
      return;
    }
    let stop = false;
    setState((s) => ({ ...s, error: null, loading: true }));
    client.previewRemoval({ name, reboot, force }).then(
      (preview) => !stop && setState({ preview, error: null, loading: false }),
      (error) => !stop && setState({ preview: null, error, loading: false }),
    );
    return () => {
      stop = true;
    };
  }, [open, name, reboot, force]);
  return state;
}

/** RemoveDialog asks for the removal's options, shows its preview, and removes the machine once its name is typed and the checks allow it. */
export function RemoveDialog({ m, open, onClose }: { m: Machine; open: boolean; onClose: () => void }) {
  const { client } = useConsole();
  const [typed, setTyped] = useState("");
  const [reboot, setReboot] = useState(true);
  const [force, setForce] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const name = m.name ?? "";
  const { preview, error: previewError, loading } = useRemovalPreview(client, name, open, reboot, force);
  // The preview of the options shown, and the checks allow it now.
  const allowed = !loading && preview?.allowed === true;
  function close() {
    setTyped("");
    setForce(false);
    setError(null);
    onClose();
  }
  async function submit(e: Event) {
    e.preventDefault();
    if (typed !== name || !allowed) return;
    setBusy(true);
    setError(null);
    try {
      await client.removeMachine({ name, body: { reboot, force } });
      close();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return (
    <Dialog open={open} onClose={close} title={`Remove ${name}?`} description={<>What the controller would do, from what Ichor knows now. Counts are those of the approved machines; the live etcd members are checked again before a member leaves.</>}>
      <form onSubmit={submit} class="flex flex-col gap-3">
        <Checkbox id="remove-reboot" checked={reboot} onChange={(e) => setReboot(e.currentTarget.checked)} label="Reboot into maintenance mode after the reset (instead of powering off)" />
        <Checkbox id="remove-force" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} label="Dead hardware: skip drain and reset (the node is NOT wiped)" />
        <RemovalPreview preview={preview} loading={loading} error={previewError} name={name} />
        <Field id="remove-confirm" label={`Type ${name} to confirm`}>
          <Input id="remove-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
        </Field>
        <ErrorAlert error={error} what={`Removing ${name}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" variant="destructive" disabled={typed !== name || busy || !allowed} data-testid="remove-confirm-button">
            {busy ? "Removing…" : "Remove node"}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
