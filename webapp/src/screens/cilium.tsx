import { Fragment, type ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { Client, Condition, GetCiliumValuesResponse, PreviewCiliumUpgradeResponse, PreviewCiliumValuesResponse, PreviewKubeProxySwitchResponse } from "../api/generated";
import { useConsole } from "../context";
import { Alert } from "../components/ui/alert";
import { Badge, type Tone } from "../components/ui/badge";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Dialog } from "../components/ui/dialog";
import { Field, Textarea } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";
import { Loading } from "../components/loading";
import { RefusalList } from "../components/refusals";
import { navigate } from "../lib/router";
import * as api from "../api/v1alpha1";

/** handoverState is the badge of the CNIHandover condition. */
export function handoverState(c: Condition | undefined): { tone: Tone; text: string } {
  if (!c) return { tone: "neutral", text: "Not reported yet" };
  if (c.status === "True") return { tone: "ok", text: "Handed over" };
  if (c.reason === api.CNIHandoverFailedReason) return { tone: "bad", text: "Failed" };
  return { tone: "warn", text: c.reason || "Pending" };
}

/**
 * CiliumPage is the Cilium page (architecture, "Cilium", "Values"): the
 * hand-over, the chart, the effective values (read-only) and an editor of
 * the user's layer. Preview asks ichor-ui to check the text with the
 * webhook's rule and render the chart before and after; Save is enabled
 * only after a successful preview of the text as it is, and writes it as
 * the signed-in user (admins: `update` on `talosclusters/cilium-values`).
 */
export function CiliumPage() {
  const { client, canWrite } = useConsole();
  return (
    <CiliumValues client={client}>
      <CiliumUpgradeCard client={client} canWrite={canWrite} />
      <KubeProxyCard client={client} canWrite={canWrite} />
    </CiliumValues>
  );
}

/** CiliumValues is the page's values part; children (the upgrade and kube-proxy cards) go under the hand-over. */
export function CiliumValues({ client, children }: { client: Client; children?: ComponentChildren }) {
  const [data, setData] = useState<GetCiliumValuesResponse | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [text, setText] = useState<string | null>(null);
  const [preview, setPreview] = useState<{ text: string; res: PreviewCiliumValuesResponse } | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [saveError, setSaveError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState<"preview" | "save" | null>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    let stop = false;
    client.getCiliumValues().then(
      (r) => {
        if (stop) return;
        setData(r);
        setLoadError(null);
        setText((t) => (t === null ? (r.valuesYaml ?? "") : t));
      },
      (e) => !stop && setLoadError(e),
    );
    return () => {
      stop = true;
    };
  }, [client, tick]);

  const current = text ?? "";
  const refusals = preview?.res.refusals ?? [];
  const previewed = preview !== null && preview.text === current && refusals.length === 0;
  const canSave = previewed && busy === null && (data?.canWrite ?? false);

  const runPreview = async () => {
    setBusy("preview");
    setPreviewError(null);
    setSaveError(null);
    setSaved(false);
    try {
      const res = await client.previewCiliumValues({ body: { valuesYaml: current } });
      setPreview({ text: current, res });
    } catch (e) {
      setPreview(null);
      setPreviewError(e);
    } finally {
      setBusy(null);
    }
  };
  const save = async () => {
    setBusy("save");
    setSaveError(null);
    try {
      const res = await client.updateCiliumValues({ body: { valuesYaml: current } });
      if (res.values) setData(res.values);
      setSaved(true);
      setPreview(null);
      setTick((t) => t + 1);
    } catch (e) {
      setSaveError(e);
    } finally {
      setBusy(null);
    }
  };

  const state = handoverState(data?.handover);
  const objects = preview?.res.objects ?? [];
  return (
    <>
      <h1 class="text-xl font-semibold">Cilium</h1>
      <ErrorAlert error={loadError} what="Reading the Cilium values" />
      {data && (
        <Card>
          <CardHeader>
            <CardTitle>
              Hand-over <Badge tone={state.tone}>{state.text}</Badge>
            </CardTitle>
          </CardHeader>
          <CardContent class="text-sm">
            <dl class="grid grid-cols-[max-content_1fr] gap-x-4 gap-y-1">
              <dt class="text-muted-foreground">Chart</dt>
              <dd data-testid="cilium-chart">Cilium {data.chartVersion}</dd>
              <dt class="text-muted-foreground">Values applied</dt>
              <dd data-testid="cilium-applied">{data.applied ? "yes" : "not yet: the controller applies them with Helm"}</dd>
              {data.handover?.message && (
                <>
                  <dt class="text-muted-foreground">Hand-over</dt>
                  <dd data-testid="cilium-handover">{data.handover.message}</dd>
                </>
              )}
            </dl>
          </CardContent>
        </Card>
      )}
      {data && children}
      {data && (
        <Card>
          <CardHeader>
            <CardTitle>Your values</CardTitle>
          </CardHeader>
          <CardContent class="flex flex-col gap-3 text-sm">
            <Field
              id="cilium-values"
              label="Your layer of Cilium Helm values (YAML)"
              hint="Ichor's defaults lie under this layer and the Ichor-owned keys over it (IPAM, tunnel, kube-proxy replacement, the KubePrism endpoint, cgroup, capabilities, certificate generation); setting one of those is refused."
            >
              <Textarea
                id="cilium-values"
                class="min-h-64 font-mono"
                spellcheck={false}
                value={current}
                onInput={(e) => {
                  setText(e.currentTarget.value);
                  setSaved(false);
                }}
              />
            </Field>
            <div class="flex flex-wrap items-center gap-2">
              <Button variant="outline" onClick={runPreview} disabled={busy !== null} data-testid="cilium-preview">
                {busy === "preview" ? "Previewing…" : "Preview"}
              </Button>
              <Button onClick={save} disabled={!canSave} data-testid="cilium-save">
                {busy === "save" ? "Saving…" : "Save"}
              </Button>
              {!data.canWrite && <span class="text-xs text-muted-foreground">Saving needs `update` on `talosclusters/cilium-values` (the ichor-admin role).</span>}
              {data.canWrite && !previewed && <span class="text-xs text-muted-foreground">Preview the values as they are to enable Save.</span>}
            </div>
            <ErrorAlert error={previewError} what="Previewing the Cilium values" />
            <RefusalList refusals={refusals} title="These values would be refused; nothing can be saved" testid="cilium-refusals" />
            {preview && refusals.length === 0 && objects.length === 0 && (
              <Alert title="No change">
                <span data-testid="cilium-nochange">The rendered Cilium {preview.res.chartVersion} objects do not change.</span>
              </Alert>
            )}
            {preview && objects.length > 0 && (
              <section aria-labelledby="cilium-diff-title" class="flex flex-col gap-2">
                <h2 id="cilium-diff-title" class="font-medium">
                  What changes in the rendered Cilium {preview.res.chartVersion} objects
                </h2>
                <ul class="list-disc pl-5" data-testid="cilium-objects">
                  {objects.map((o) => (
                    <li key={o.object}>
                      {o.change} {o.object}
                    </li>
                  ))}
                </ul>
                <pre class="max-h-[32rem] overflow-auto rounded-md border bg-muted p-3 font-mono text-xs" data-testid="cilium-diff" tabIndex={0} aria-label="Unified diff of the rendered objects">
                  {preview.res.diff}
                </pre>
              </section>
            )}
            <ErrorAlert error={saveError} what="Saving the Cilium values" />
            {saved && (
              <Alert title="Saved">
                <span data-testid="cilium-saved">The controller applies the values with Helm; the hand-over above says how it went.</span>
              </Alert>
            )}
          </CardContent>
        </Card>
      )}
      {data && (
        <Card>
          <CardHeader>
            <CardTitle>Effective values (read-only)</CardTitle>
          </CardHeader>
          <CardContent>
            <pre class="max-h-[32rem] overflow-auto rounded-md border bg-muted p-3 font-mono text-xs" data-testid="cilium-effective" tabIndex={0} aria-label="Effective Cilium values">
              {data.effectiveYaml}
            </pre>
          </CardContent>
        </Card>
      )}
    </>
  );
}

/**
 * upgradeOffer says what the upgrade card offers, from PreviewCiliumUpgrade
 * asked without a version: the target, or why there is none.
 */
export function upgradeOffer(p: PreviewCiliumUpgradeResponse): { target: string } | { none: string } {
  const running = p.running ?? "";
  const embedded = p.embedded ?? [];
  if (p.target) return { target: p.target };
  if (!running) return { none: "The running Cilium version is not known yet: the controller reads it from the running agent. Reload in a few minutes." };
  if (running === embedded[embedded.length - 1]) return { none: `Cilium ${running} is the newest chart this Ichor carries.` };
  return { none: `This Ichor carries no chart Cilium ${running} can move to (it carries ${embedded.join(", ") || "none"}); a newer Ichor brings one.` };
}

/**
 * CiliumUpgradeCard is the Cilium page's Upgrade card: the running Cilium,
 * the charts this Ichor embeds, and the chart it offers (PreviewCiliumUpgrade,
 * the same choice as `ichor cni upgrade`) behind a confirmation dialog. The
 * start needs `create` on talosoperations (operators and admins); the
 * backend and the webhook check it and the upgrade's rules again.
 */
export function CiliumUpgradeCard({ client, canWrite }: { client: Client; canWrite: boolean }) {
  const [preview, setPreview] = useState<PreviewCiliumUpgradeResponse | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [open, setOpen] = useState(false);

  useEffect(() => {
    let stop = false;
    client.previewCiliumUpgrade().then(
      (p) => !stop && setPreview(p),
      (e) => !stop && setError(e),
    );
    return () => {
      stop = true;
    };
  }, [client]);

  const offer = preview ? upgradeOffer(preview) : null;
  return (
    <Card aria-labelledby="cilium-upgrade-title">
      <CardHeader>
        <CardTitle id="cilium-upgrade-title">Upgrade</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3 text-sm" data-testid="cilium-upgrade">
        <ErrorAlert error={error} what="Checking for a Cilium upgrade" />
        <Loading when={!preview && !error} />
        {preview && (
          <dl class="grid grid-cols-[max-content_1fr] gap-x-4 gap-y-1">
            <dt class="text-muted-foreground">Running</dt>
            <dd data-testid="cilium-running">{preview.running ? `Cilium ${preview.running}` : "not known yet"}</dd>
            <dt class="text-muted-foreground">Charts this Ichor carries</dt>
            <dd data-testid="cilium-embedded">{(preview.embedded ?? []).join(", ")}</dd>
          </dl>
        )}
        {offer && "none" in offer && <p data-testid="cilium-upgrade-none">{offer.none}</p>}
        {offer && "target" in offer && (
          <div class="flex flex-wrap items-center gap-2">
            <Button onClick={() => setOpen(true)} disabled={!canWrite} data-testid="cilium-upgrade-open">
              Upgrade Cilium to {offer.target}
            </Button>
            {!canWrite && <span class="text-xs text-muted-foreground">Upgrading Cilium needs the operator or admin role (`create` on `talosoperations`).</span>}
          </div>
        )}
        {open && offer && "target" in offer && (
          <CiliumUpgradeDialog client={client} running={preview?.running ?? ""} target={offer.target} open={open} onClose={() => setOpen(false)} />
        )}
      </CardContent>
    </Card>
  );
}

/**
 * usePreviewThenStart is a start dialog's state: the server's preview,
 * fetched fresh each time the dialog opens (deps name what it depends on);
 * ready once the preview allows the start; submit starts the operation and
 * opens its page, or keeps the server's refusal to show.
 */
function usePreviewThenStart<P extends { allowed?: boolean }>(
  open: boolean,
  load: () => Promise<P>,
  start: () => Promise<{ operation?: { name?: string } }>,
  deps: unknown[],
  onClose: () => void,
) {
  const [preview, setPreview] = useState<P | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPreview(null);
    setPreviewError(null);
    load().then(
      (p) => !stop && setPreview(p),
      (e) => !stop && setPreviewError(e),
    );
    return () => {
      stop = true;
    };
    // load is a new function each render; deps name what it reads.
  }, [open, ...deps]);

  function close() {
    setError(null);
    onClose();
  }

  const ready = preview?.allowed === true && !busy;
  async function submit(e: Event) {
    e.preventDefault();
    if (!ready) return;
    setBusy(true);
    setError(null);
    try {
      const res = await start();
      close();
      // A start that names its operation opens it; one the controller
      // starts later (the kube-proxy switch) leaves the page to show it.
      if (res.operation?.name) navigate(`/operations/${encodeURIComponent(res.operation.name)}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return { preview, previewError, busy, error, ready, close, submit };
}

/**
 * CiliumUpgradeDialog confirms a Cilium chart upgrade: what it does, what
 * refuses it now and what to know (PreviewCiliumUpgrade for the target,
 * fresh), then StartCiliumUpgrade; it opens the operation's page.
 */
export function CiliumUpgradeDialog({ client, running, target, open, onClose }: { client: Client; running: string; target: string; open: boolean; onClose: () => void }) {
  const { preview, previewError, busy, error, ready, close, submit } = usePreviewThenStart(
    open,
    () => client.previewCiliumUpgrade({ version: target }),
    () => client.startCiliumUpgrade({ body: { version: target } }),
    [client, target],
    onClose,
  );

  const from = preview?.running || running;
  const warnings = preview?.warnings ?? [];
  return (
    <Dialog open={open} onClose={close} title={`Upgrade Cilium to ${target}?`}>
      <form onSubmit={submit} class="flex flex-col gap-3 text-sm" data-testid="cilium-upgrade-dialog">
        <ul class="list-disc space-y-1 pl-5 text-muted-foreground" data-testid="cilium-upgrade-explain">
          <li>
            Helm upgrades the release kube-system/cilium{from ? ` from ${from}` : ""} to the chart {target} this Ichor carries; Cilium moves at most one minor at a time.
          </li>
          <li>If the upgrade fails, Helm rolls the release back to the chart that ran.</li>
          <li>It runs under the cluster lock: no other operation changes the cluster meanwhile.</li>
        </ul>
        <ErrorAlert error={previewError} what="Checking the Cilium upgrade" />
        <Loading when={!preview && !previewError} />
        {preview && <RefusalList refusals={preview.refusals ?? []} title="The checks refuse this upgrade now; nothing can be started" testid="cilium-upgrade-refusals" />}
        {warnings.length > 0 && (
          <Alert tone="warn" title="Before you go on">
            <ul class="list-disc pl-5" data-testid="cilium-upgrade-warnings">
              {warnings.map((w, i) => (
                <li key={i}>{w}</li>
              ))}
            </ul>
          </Alert>
        )}
        <ErrorAlert error={error} what={`Upgrading Cilium to ${target}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" disabled={!ready} data-testid="cilium-upgrade-start">
            {busy ? "Starting…" : `Upgrade to ${target}`}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

/** consistencyState is the badge of the KubeProxyConsistent condition. */
export function consistencyState(c: Condition | undefined): { tone: Tone; text: string } {
  if (!c) return { tone: "neutral", text: "Not reported yet" };
  if (c.status === "True") return { tone: "ok", text: "Consistent" };
  return { tone: "bad", text: c.reason || "Inconsistent" };
}

/** kubeProxyModeText says what a kube-proxy mode means. */
function kubeProxyModeText(mode: string): string {
  return mode === api.KubeProxyReplaced ? "replaced (Cilium replaces kube-proxy)" : "enabled (Talos runs kube-proxy)";
}

/**
 * KubeProxyCard is the Cilium page's kube-proxy card: the cluster's mode
 * (spec.cni.kubeProxy), the KubeProxyConsistent condition, an unfinished
 * switch with its step (linked to the operation), and a button that opens
 * the switch to the other mode (PreviewKubeProxySwitch, the same checks and
 * steps as `ichor cni kube-proxy MODE`). The start needs `create` on
 * talosoperations (operators and admins).
 */
export function KubeProxyCard({ client, canWrite }: { client: Client; canWrite: boolean }) {
  const [preview, setPreview] = useState<PreviewKubeProxySwitchResponse | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [open, setOpen] = useState(false);
  const [reads, setReads] = useState(0);

  useEffect(() => {
    let stop = false;
    client.previewKubeProxySwitch().then(
      (p) => !stop && setPreview(p),
      (e) => !stop && setError(e),
    );
    return () => {
      stop = true;
    };
  }, [client, reads]);

  const state = consistencyState(preview?.consistent);
  const unfinished = preview?.unfinished ?? [];
  const target = preview?.target ?? "";
  return (
    <Card aria-labelledby="kube-proxy-title">
      <CardHeader>
        <CardTitle id="kube-proxy-title">
          kube-proxy {preview && <Badge tone={state.tone}>{state.text}</Badge>}
        </CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3 text-sm" data-testid="kube-proxy">
        <ErrorAlert error={error} what="Reading the kube-proxy mode" />
        <Loading when={!preview && !error} />
        {preview && (
          <dl class="grid grid-cols-[max-content_1fr] gap-x-4 gap-y-1">
            <dt class="text-muted-foreground">Mode</dt>
            <dd data-testid="kube-proxy-mode">{kubeProxyModeText(preview.mode ?? "")}</dd>
            <dt class="text-muted-foreground">Consistency</dt>
            <dd data-testid="kube-proxy-consistent">{preview.consistent?.message || "not reported yet: the controller compares Cilium's live config with the mode once Cilium runs"}</dd>
            {unfinished.map((u) => (
              <Fragment key={u.name}>
                <dt class="text-muted-foreground">Switching to {u.mode}</dt>
                <dd data-testid="kube-proxy-unfinished">
                  <a class="underline" href={`/operations/${encodeURIComponent(u.name ?? "")}`}>
                    {u.name}
                  </a>
                  , step {u.step || "not started"}
                </dd>
              </Fragment>
            ))}
          </dl>
        )}
        {preview && target && unfinished.length === 0 && (
          <div class="flex flex-wrap items-center gap-2">
            <Button onClick={() => setOpen(true)} disabled={!canWrite} data-testid="kube-proxy-open">
              Switch to {target}
            </Button>
            {!canWrite && <span class="text-xs text-muted-foreground">Switching kube-proxy needs the operator or admin role (`update` on `talosclusters`).</span>}
          </div>
        )}
        {open && target && (
          <KubeProxyDialog
            client={client}
            mode={preview?.mode ?? ""}
            target={target}
            open={open}
            onClose={() => {
              setOpen(false);
              setReads((n) => n + 1);
            }}
          />
        )}
      </CardContent>
    </Card>
  );
}

/**
 * KubeProxyDialog confirms a kube-proxy switch: the steps in the order the
 * controller runs them and what refuses it now (PreviewKubeProxySwitch for
 * the target, fresh); Start is enabled only after a preview that nothing
 * refuses, then StartKubeProxySwitch writes spec.cni.kubeProxy; the card
 * then shows the switch the controller starts.
 */
export function KubeProxyDialog({ client, mode, target, open, onClose }: { client: Client; mode: string; target: string; open: boolean; onClose: () => void }) {
  const { preview, previewError, busy, error, ready, close, submit } = usePreviewThenStart(
    open,
    () => client.previewKubeProxySwitch({ mode: target }),
    () => client.startKubeProxySwitch({ body: { mode: target } }).then(() => ({})),
    [client, target],
    onClose,
  );

  const from = preview?.mode || mode;
  const steps = preview?.steps ?? [];
  return (
    <Dialog open={open} onClose={close} title={`Switch kube-proxy to ${target}?`}>
      <form onSubmit={submit} class="flex flex-col gap-3 text-sm" data-testid="kube-proxy-dialog">
        <p class="text-muted-foreground">
          kube-proxy goes from {from || "its mode"} to {target}, in this order; Services keep a proxy at every step. The operation holds the cluster lock while it runs; a failed step pauses it.
        </p>
        <ErrorAlert error={previewError} what="Checking the kube-proxy switch" />
        <Loading when={!preview && !previewError} />
        {steps.length > 0 && (
          <ol class="list-decimal space-y-1 pl-5" data-testid="kube-proxy-steps">
            {steps.map((s) => (
              <li key={s.step}>
                <code class="font-mono text-xs">{s.step}</code>: {s.action}
              </li>
            ))}
          </ol>
        )}
        {preview && <RefusalList refusals={preview.refusals ?? []} title="The checks refuse this switch now; nothing can be started" testid="kube-proxy-refusals" />}
        <ErrorAlert error={error} what={`Switching kube-proxy to ${target}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" disabled={!ready} data-testid="kube-proxy-start">
            {busy ? "Starting…" : `Switch to ${target}`}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
