import { useEffect, useState } from "preact/hooks";
import type { Client, Operation, Refusal, VersionCandidate } from "../api/generated";
import { Dialog } from "../components/ui/dialog";
import { Button, LinkButton } from "../components/ui/button";
import { Field, Input } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";

/** The candidate groups, in the order the controller records them. */
const groups = [api.CandidateRecommended, api.CandidatePatch, api.CandidateNextMinor];

/** filterCandidates keeps the candidates whose version contains the search text. */
export function filterCandidates(cs: VersionCandidate[], search: string): VersionCandidate[] {
  const s = search.trim().replace(/^v/, "");
  return s ? cs.filter((c) => (c.version ?? "").includes(s)) : cs;
}

/** The components the upgrade dialog upgrades. */
export type UpgradeKind = "talos" | "kubernetes";

/** What the dialog reads and writes for one component, the same shape for both. */
interface Preview {
  cluster?: string;
  current?: string;
  candidates?: VersionCandidate[];
  source?: string;
  sourceMessage?: string;
  version?: string;
  refusals?: Refusal[];
  unfinished?: Operation;
  warnings?: string[];
  /** The downtime of a single-node cluster (Talos only); the typed name accepts it. */
  downtime?: string;
}

interface Started {
  from?: string;
  to?: string;
}

/** kinds are what differs between a Talos and a Kubernetes upgrade. */
const kinds: Record<
  UpgradeKind,
  {
    name: string;
    placeholder: string;
    description: string;
    checked: string;
    preview: (c: Client, version?: string) => Promise<Preview>;
    start: (c: Client, version: string, confirm: string) => Promise<Started>;
  }
> = {
  talos: {
    name: "Talos",
    placeholder: "1.14",
    description: "Every machine is drained, upgraded and rebooted: control planes first, one at a time, then the workers. A failed step pauses the operation.",
    checked: "the upgrade path and the Kubernetes pairing are supported. The operation checks etcd and every node again before it starts.",
    preview: (c, version) => c.previewTalosUpgrade(version ? { version } : {}),
    start: (c, version, confirm) => c.startTalosUpgrade({ body: { version, confirmClusterName: confirm } }),
  },
  kubernetes: {
    name: "Kubernetes",
    placeholder: "1.37",
    description:
      "One minor up at most, without reboots, in three stages each finished on every machine before the next: the control-plane components one control plane at a time, then kube-proxy and Talos's bootstrap manifests, then every kubelet (control planes first). The images are pulled on every node first. A failed step pauses the operation.",
    checked:
      "one minor up at most from what runs, and supported by the cluster's Talos. The operation's pre-checks then look for APIs in use that this version removes, and for every node Ready, before anything changes.",
    preview: (c, version) => c.previewKubernetesUpgrade(version ? { version } : {}),
    start: (c, version, confirm) => c.startKubernetesUpgrade({ body: { version, confirmClusterName: confirm } }),
  },
};

/** TalosUpgradeDialog is the upgrade dialog opened on Talos. */
export function TalosUpgradeDialog(props: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  return <UpgradeDialog {...props} initial="talos" />;
}

/**
 * UpgradeDialog offers the Talos or the Kubernetes versions the controller
 * found (PreviewTalosUpgrade / PreviewKubernetesUpgrade: grouped Recommended /
 * Patch / Next minor, the default chosen, searchable), checks the chosen or
 * typed version on the server the way `ichor upgrade talos|kubernetes
 * VERSION` does and shows what refuses it, asks for the cluster's name, and
 * starts the upgrade (StartTalosUpgrade writes spec.talosVersion,
 * StartKubernetesUpgrade spec.kubernetesVersion; the controller starts the
 * operation). The component is chosen at the top.
 */
export function UpgradeDialog({ client, cluster, open, onClose, initial }: { client: Client; cluster: string; open: boolean; onClose: () => void; initial: UpgradeKind }) {
  const [kind, setKind] = useState<UpgradeKind>(initial);
  const k = kinds[kind];
  const [preview, setPreview] = useState<Preview | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [search, setSearch] = useState("");
  const [version, setVersion] = useState("");
  const [check, setCheck] = useState<Preview | null>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [started, setStarted] = useState<Started | null>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPreview(null);
    setPreviewError(null);
    setCheck(null);
    setVersion("");
    setSearch("");
    k.preview(client).then(
      (p) => {
        if (stop) return;
        setPreview(p);
        const def = (p.candidates ?? []).find((c) => c.default);
        if (def?.version) setVersion(def.version);
      },
      (e) => !stop && setPreviewError(e),
    );
    return () => {
      stop = true;
    };
  }, [open, client, kind]);

  // The server checks the version chosen or typed (a typed one not in the list too).
  useEffect(() => {
    if (!open || !version.trim()) {
      setCheck(null);
      return;
    }
    let stop = false;
    const t = setTimeout(() => {
      k.preview(client, version.trim()).then(
        (p) => !stop && setCheck(p),
        (e) => !stop && setPreviewError(e),
      );
    }, 250);
    return () => {
      stop = true;
      clearTimeout(t);
    };
  }, [open, client, version, kind]);

  function close() {
    setTyped("");
    setSearch("");
    setError(null);
    setStarted(null);
    setCheck(null);
    onClose();
  }

  const id = `${kind}-upgrade`;
  const name = preview?.cluster || cluster;
  const candidates = filterCandidates(preview?.candidates ?? [], search);
  const refusals = check?.refusals ?? [];
  const checked = !!check && check.version === (version.trim().startsWith("v") ? version.trim() : `v${version.trim()}`);
  const ready = checked && refusals.length === 0 && !preview?.unfinished;

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready || typed.trim() !== name) return;
    setBusy(true);
    setError(null);
    try {
      setStarted(await k.start(client, version.trim(), typed.trim()));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog open={open} onClose={close} title={`Upgrade ${k.name} on ${name}`} description={<>{k.description}</>}>
      <div class="mb-3 flex gap-2" role="tablist" aria-label="Component to upgrade">
        {(Object.keys(kinds) as UpgradeKind[]).map((c) => (
          <Button
            key={c}
            type="button"
            variant={c === kind ? "default" : "outline"}
            role="tab"
            aria-selected={c === kind}
            data-testid={`upgrade-kind-${c}`}
            disabled={!!started}
            onClick={() => {
              setTyped("");
              setError(null);
              setKind(c);
            }}
          >
            {kinds[c].name}
          </Button>
        ))}
      </div>
      {started ? (
        <div class="flex flex-col gap-3" data-testid={`${id}-started`}>
          <Alert title={`Upgrading from ${started.from} to ${started.to}`}>The controller starts a {kind} operation; follow it on Operations.</Alert>
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Close
            </Button>
            <LinkButton variant="default" href="/operations">
              Open Operations
            </LinkButton>
          </div>
        </div>
      ) : (
        <form onSubmit={submit} class="flex flex-col gap-3">
          <ErrorAlert error={previewError} what="Reading the upgrade candidates" />
          {!preview && !previewError && (
            <p class="text-sm text-muted-foreground" role="status">
              Reading the candidates…
            </p>
          )}
          {preview && (
            <p class="text-sm">
              Running <span class="font-mono">{preview.current}</span>
              {preview.source && <span class="text-muted-foreground"> · candidates from {preview.source}</span>}
            </p>
          )}
          {preview?.sourceMessage && (
            <Alert tone="warn" title="The release source could not be read">
              {preview.sourceMessage}
            </Alert>
          )}
          {preview?.unfinished && (
            <Alert tone="warn" title={`${k.name} operation ${preview.unfinished.name} has not finished (${preview.unfinished.phase || api.OperationPending})`}>
              Let it finish or resume it first:{" "}
              <a class="underline" href={`/operations/${encodeURIComponent(preview.unfinished.name ?? "")}`}>
                open {preview.unfinished.name}
              </a>
              .
            </Alert>
          )}
          {preview && (
            <Field id={`${id}-search`} label="Search the candidates">
              <Input id={`${id}-search`} value={search} onInput={(e) => setSearch(e.currentTarget.value)} autoComplete="off" spellcheck={false} placeholder={k.placeholder} />
            </Field>
          )}
          {preview && (
            <div class="max-h-60 overflow-y-auto text-sm" data-testid={`${id}-candidates`} role="radiogroup" aria-label={`${k.name} versions`}>
              {candidates.length === 0 && <p class="text-muted-foreground">No candidate {search ? "matches" : "is offered"}; type a version below.</p>}
              {groups.map((g) => {
                const inGroup = candidates.filter((c) => c.group === g);
                if (!inGroup.length) return null;
                return (
                  <fieldset key={g} class="mb-2" data-group={g}>
                    <legend class="text-xs font-semibold text-muted-foreground">{g}</legend>
                    {inGroup.map((c) => (
                      <label key={c.version} class="flex items-center gap-2 py-0.5">
                        <input type="radio" name={`${kind}-version`} value={c.version} checked={version === c.version} onChange={() => setVersion(c.version ?? "")} />
                        <span class="font-mono">{c.version}</span>
                        {c.default && <Badge tone="ok">default</Badge>}
                      </label>
                    ))}
                  </fieldset>
                );
              })}
            </div>
          )}
          {preview && (
            <Field id={`${id}-version`} label="Version" hint="A version not in the list can be typed; the server checks it the same way.">
              <Input id={`${id}-version`} value={version} onInput={(e) => setVersion(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          {checked && refusals.length > 0 && (
            <Alert tone="error" title={`${k.name} ${check?.version} is refused`}>
              <ul class="list-disc pl-5" data-testid={`${id}-refusals`}>
                {refusals.map((r, i) => (
                  <li key={i}>
                    {r.rule}. {r.wayOut}
                  </li>
                ))}
              </ul>
            </Alert>
          )}
          {checked && refusals.length === 0 && check?.downtime && (
            <Alert tone="warn" title="There will be downtime">
              <p data-testid={`${id}-downtime`}>{check.downtime}. Typing the cluster's name accepts it.</p>
            </Alert>
          )}
          {checked && (check?.warnings ?? []).length > 0 && (
            <Alert tone="warn" title="Before you go on">
              <ul class="list-disc pl-5" data-testid={`${id}-warnings`}>
                {(check?.warnings ?? []).map((w, i) => (
                  <li key={i}>{w}</li>
                ))}
              </ul>
            </Alert>
          )}
          {checked && refusals.length === 0 && (
            <p class="text-sm" data-testid={`${id}-checked`}>
              {preview?.current} → {check?.version}: {k.checked}
            </p>
          )}
          {ready && (
            <Field id={`${id}-confirm`} label={`Type ${name} to confirm`}>
              <Input id={`${id}-confirm`} value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          <ErrorAlert error={error} what="Starting the upgrade" />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Cancel
            </Button>
            <Button type="submit" disabled={!ready || typed.trim() !== name || busy} data-testid={`${id}-start`}>
              {busy ? "Starting…" : "Upgrade"}
            </Button>
          </div>
        </form>
      )}
    </Dialog>
  );
}
