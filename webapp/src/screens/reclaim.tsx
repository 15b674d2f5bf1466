import { useEffect, useRef, useState } from "preact/hooks";
import { useConsole } from "../context";
import type { Reclaim } from "../api/generated";
import { canConfirm, isIP, reclaimFinished, reclaimTone, reclaimable, uuidMatches } from "../lib/reclaim";
import { CardContent, CardDescription, CardHeader } from "../components/ui/card";
import { Button } from "../components/ui/button";
import { Checkbox, Field, Input, Select, Textarea, focusFirst } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";

/** pollMs is how often a reclaim in progress is read again. */
const pollMs = 2000;

/**
 * ResetAndAdd is "Reset and add": reset a machine another cluster configured
 * with a talosconfig of that cluster, then add it as pending. The talosconfig
 * lives only in this form's state until the request is sent, and is cleared
 * when it is; the backend keeps it in a Secret that expires.
 */
export function ResetAndAdd({ open, onToggle, prefill }: { open: boolean; onToggle: (open: boolean) => void; prefill: { address: string; n: number } | null }) {
  const { client, cluster, refreshCluster } = useConsole();
  const found = reclaimable(cluster?.discovery?.results);
  const [address, setAddress] = useState("");
  const [talosconfig, setTalosconfig] = useState("");
  const [ttl, setTtl] = useState("15m");
  const [force, setForce] = useState(false);
  const [forceConfirmed, setForceConfirmed] = useState(false);
  const [ungraceful, setUngraceful] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [reclaim, setReclaim] = useState<Reclaim | null>(null);
  const [typed, setTyped] = useState("");
  const [cancelled, setCancelled] = useState(false);
  const [errors, setErrors] = useState<Record<string, string>>({});

  // A discovery row's "Reset and add…": its address, and the talosconfig next.
  const box = useRef<HTMLElement>(null);
  useEffect(() => {
    if (!prefill) return;
    setAddress(prefill.address);
    requestAnimationFrame(() => {
      box.current?.scrollIntoView({ block: "start" });
      document.getElementById("reclaim-talosconfig")?.focus();
    });
  }, [prefill?.n]);

  // Follow the reclaim until it ends.
  const name = reclaim?.name;
  const done = reclaimFinished(reclaim ?? undefined) || cancelled;
  useEffect(() => {
    if (!name || done) return;
    const t = setInterval(() => {
      client.getReclaim({ name }).then(
        (r) => {
          setReclaim(r.reclaim ?? null);
          if (r.reclaim?.phase === api.ReclaimDone) refreshCluster();
        },
        (e) => setError(e),
      );
    }, pollMs);
    return () => clearInterval(t);
  }, [name, done]);

  async function start(e: Event) {
    e.preventDefault();
    setError(null);
    const problems: Record<string, string> = {};
    const addressField = found.length ? "reclaim-address-typed" : "reclaim-address";
    if (!isIP(address)) problems[addressField] = "Give the machine's IP address, such as 192.168.1.20.";
    if (!talosconfig.trim()) problems["reclaim-talosconfig"] = "Paste the other cluster's talosconfig.";
    if (force && !forceConfirmed) problems["reclaim-force-confirm"] = "Overriding the quorum refusals needs this box ticked too.";
    setErrors(problems);
    if (Object.keys(problems).length) {
      focusFirst(problems, [addressField, "reclaim-talosconfig", "reclaim-force-confirm"]);
      return;
    }
    setBusy(true);
    try {
      const r = await client.startReclaim({
        body: { address: address.trim(), talosconfig, ttl: ttl || undefined, force: force || undefined, forceUngraceful: ungraceful || undefined },
      });
      setReclaim(r.reclaim ?? null);
      setCancelled(false);
      setTyped("");
    } catch (err) {
      setError(err);
    } finally {
      // The talosconfig is not kept in the browser beyond the request.
      setTalosconfig("");
      setBusy(false);
    }
  }

  async function confirm(e: Event) {
    e.preventDefault();
    if (!reclaim?.name) return;
    setError(null);
    setBusy(true);
    try {
      const r = await client.confirmReclaim({ name: reclaim.name, body: { uuid: typed } });
      setReclaim(r.reclaim ?? null);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  async function cancel() {
    if (!reclaim?.name) return;
    setError(null);
    setBusy(true);
    try {
      const r = await client.cancelReclaim({ name: reclaim.name, body: {} });
      setReclaim(r.reclaim ?? reclaim);
      setCancelled(true);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  const ins = reclaim?.inspection;
  return (
    <section ref={box} aria-labelledby="reclaim-title" class="rounded-lg border bg-card shadow-sm">
      <details open={open} onToggle={(e) => onToggle((e.currentTarget as HTMLDetailsElement).open)}>
      <summary class="cursor-pointer p-4">
        <h2 id="reclaim-title" class="inline text-base font-semibold">
          Machine configured by another cluster
        </h2>
        <span class="block text-sm text-muted-foreground">Reset it with that cluster's talosconfig and add it here.</span>
      </summary>
      <CardHeader class="pt-0">
        <CardDescription>
          A machine another Talos cluster configured answers only that cluster's talosconfig. Paste it to wipe the machine's STATE and EPHEMERAL (user disks
          stay) so it comes back in maintenance mode and waits for approval here. Only the address below is dialled; the talosconfig is kept in an expiring
          Secret and deleted when the reset ends.
        </CardDescription>
      </CardHeader>
      <CardContent class="flex flex-col gap-4">
        {!reclaim && (
          <form onSubmit={start} class="flex flex-col gap-3" aria-label="Start a reset and add">
            <div class="grid grid-cols-1 gap-3 md:grid-cols-2">
              <Field id="reclaim-address" label="Address" error={found.length ? undefined : errors["reclaim-address"]} hint={found.length ? "Discovery found these configured by another cluster" : "The machine's IP address"}>
                {found.length ? (
                  <Select id="reclaim-address" value={address} onChange={(e) => setAddress(e.currentTarget.value)}>
                    <option value="">Choose or type below…</option>
                    {found.map((a) => (
                      <option key={a} value={a}>
                        {a}
                      </option>
                    ))}
                  </Select>
                ) : (
                  <Input id="reclaim-address" value={address} onInput={(e) => setAddress(e.currentTarget.value)} placeholder="192.168.1.20" />
                )}
              </Field>
              <Field id="reclaim-ttl" label="Credential lifetime" hint="1m to 60m; the reset must be confirmed within it">
                <Input id="reclaim-ttl" value={ttl} onInput={(e) => setTtl(e.currentTarget.value)} />
              </Field>
            </div>
            {found.length > 0 && (
              <Field id="reclaim-address-typed" label="Or another address" error={errors["reclaim-address-typed"]}>
                <Input id="reclaim-address-typed" value={address} onInput={(e) => setAddress(e.currentTarget.value)} placeholder="192.168.1.20" />
              </Field>
            )}
            <Field id="reclaim-talosconfig" label="The other cluster's talosconfig" error={errors["reclaim-talosconfig"]} hint="Its current context's ca, crt and key are used; its endpoints are ignored">
              <Textarea
                id="reclaim-talosconfig"
                rows={8}
                value={talosconfig}
                onInput={(e) => setTalosconfig(e.currentTarget.value)}
                autocomplete="off"
                spellcheck={false}
                class="font-mono text-xs"
              />
            </Field>
            <Checkbox id="reclaim-ungraceful" checked={ungraceful} onChange={(e) => setUngraceful(e.currentTarget.checked)} label="The other cluster is dead: reset without leaving etcd or draining" />
            <Checkbox id="reclaim-force" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} label="Override the quorum and last-control-plane refusals" />
            {force && (
              <Checkbox
                id="reclaim-force-confirm"
                error={errors["reclaim-force-confirm"]}
                checked={forceConfirmed}
                onChange={(e) => setForceConfirmed(e.currentTarget.checked)}
                label="I understand this can break the other cluster's etcd"
              />
            )}
            <div>
              <Button type="submit" disabled={busy}>
                {busy ? "Starting…" : "Inspect the machine"}
              </Button>
            </div>
          </form>
        )}

        {reclaim && (
          <div class="flex flex-col gap-3" data-testid="reclaim">
            <div class="flex flex-wrap items-center gap-2 text-sm">
              <span class="font-mono">{reclaim.address}</span>
              <Badge tone={cancelled ? "neutral" : reclaimTone(reclaim)}>{cancelled ? "Cancelled" : reclaim.phase || "Waiting for the controller"}</Badge>
              {reclaim.message && <span class="text-muted-foreground">{reclaim.message}</span>}
            </div>
            {ins?.uuid && (
              <dl class="grid grid-cols-1 gap-2 text-sm sm:grid-cols-3">
                <div class="min-w-0">
                  <dt class="text-xs text-muted-foreground">UUID</dt>
                  <dd class="break-all font-mono text-xs">{ins.uuid}</dd>
                </div>
                <div class="min-w-0">
                  <dt class="text-xs text-muted-foreground">Hostname</dt>
                  <dd class="break-all">{ins.hostname || "—"}</dd>
                </div>
                <div class="min-w-0">
                  <dt class="text-xs text-muted-foreground">Cluster</dt>
                  <dd class="break-all">
                    {ins.clusterName || "—"} {ins.controlPlane ? "(control plane)" : "(worker)"}
                  </dd>
                </div>
                <div class="min-w-0 sm:col-span-3">
                  <dt class="text-xs text-muted-foreground">User disks (left alone)</dt>
                  <dd class="break-all">
                    {ins.userDisks?.join(", ") || "none"}
                    {(ins.encryptedDisks?.length ?? 0) > 0 && <Badge tone="warn">encrypted: {ins.encryptedDisks!.join(", ")}</Badge>}
                  </dd>
                </div>
              </dl>
            )}
            {(ins?.refusals?.length ?? 0) > 0 && (
              <Alert tone="error" title="The reset is refused">
                <ul class="list-disc pl-4">
                  {ins!.refusals!.map((r) => (
                    <li key={r}>{r}</li>
                  ))}
                </ul>
              </Alert>
            )}
            {reclaim.failureReason && <Alert tone="error" title="Failed">{reclaim.failureReason}</Alert>}
            {reclaim.phase === api.ReclaimDone && <Alert tone="info">The machine was reset. Discovery adds it as pending below once it answers in maintenance mode.</Alert>}
            {cancelled && <Alert tone="info">Cancelled: the talosconfig was deleted and nothing was reset.</Alert>}
            {!cancelled && canConfirm(reclaim) && (
              <form onSubmit={confirm} class="flex flex-col gap-2 md:flex-row md:items-end" aria-label="Confirm the reset">
                <Field id="reclaim-uuid" label={`Type the machine's UUID to wipe it: ${ins?.uuid}`} class="flex-1">
                  <Input id="reclaim-uuid" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autocomplete="off" spellcheck={false} class="font-mono" />
                </Field>
                <Button type="submit" variant="destructive" disabled={busy || !uuidMatches(typed, ins?.uuid)}>
                  Reset {reclaim.address}
                </Button>
              </form>
            )}
            <div class="flex gap-2">
              {!done && reclaim.phase !== api.ReclaimResetting && (
                <Button variant="outline" size="sm" disabled={busy} onClick={cancel}>
                  Cancel
                </Button>
              )}
              {done && (
                <Button
                  variant="outline"
                  size="sm"
                  onClick={() => {
                    setReclaim(null);
                    setCancelled(false);
                    setError(null);
                  }}
                >
                  Reset another machine
                </Button>
              )}
            </div>
          </div>
        )}
        <ErrorAlert error={error} what="Reset and add" />
      </CardContent>
    </details>
    </section>
  );
}
