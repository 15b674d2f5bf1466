import { useEffect, useState } from "preact/hooks";
import type { Client, DownloadRotationCredentialsResponse, Operation, PreviewCARotationResponse } from "../api/generated";
import * as api from "../api/v1alpha1";
import { useConsole } from "../context";
import { Alert } from "../components/ui/alert";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Dialog } from "../components/ui/dialog";
import { Field, Input } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";
import { Loading } from "../components/loading";
import { RefusalList } from "../components/refusals";
import { saveFile } from "../lib/download";
import { navigate } from "../lib/router";

/** Which CAs the dialog rotates. */
export type CAChoice = "both" | "talos" | "kubernetes";

/** caChoiceArgs is the request's talos_only / kubernetes_only for a choice. */
export function caChoiceArgs(c: CAChoice): { talosOnly: boolean; kubernetesOnly: boolean } {
  return { talosOnly: c === "talos", kubernetesOnly: c === "kubernetes" };
}

/** canStartCARotation: allowed by the backend and the cluster's name typed. */
export function canStartCARotation(p: { allowed?: boolean; cluster?: string } | null, typed: string): boolean {
  return !!p?.allowed && !!p.cluster && typed.trim() === p.cluster;
}

/** The plan a rotation dialog shows (PreviewCARotation, PreviewKeyRotation). */
interface RotationPlan {
  cluster?: string;
  steps?: string[];
  refusals?: PreviewCARotationResponse["refusals"];
  allowed?: boolean;
}

/** What one kind of rotation's dialog says and calls. */
interface RotationKind<C extends string> {
  /** testid prefix: rotate-ca, rotate-keys. */
  id: string;
  /** what is rotated, for the texts: "CAs", "keys". */
  what: string;
  description: preact.ComponentChildren;
  choices: [C, string][];
  /** an optional checkbox beside the choices (the aggregator CA). */
  extra?: string;
  preview: (c: C, extra: boolean) => Promise<RotationPlan>;
  start: (confirm: string, c: C, extra: boolean) => Promise<{ operation?: Operation }>;
}

/**
 * RotateDialog starts a rotation: the backend's plan (the stages and what
 * the checks and the user's verbs refuse), what to rotate, the cluster's
 * name typed, then the start; it opens the operation's page.
 */
function RotateDialog<C extends string>({ kind, cluster, open, onClose }: { kind: RotationKind<C>; cluster: string; open: boolean; onClose: () => void }) {
  const [choice, setChoice] = useState<C>(kind.choices[0][0]);
  const [extra, setExtra] = useState(false);
  const [preview, setPreview] = useState<RotationPlan | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPreview(null);
    setPreviewError(null);
    kind.preview(choice, extra).then(
      (p) => !stop && setPreview(p),
      (e) => !stop && setPreviewError(e),
    );
    return () => {
      stop = true;
    };
    // kind is rebuilt on every render of its wrapper (a new object, the same calls): the choice decides the plan
  }, [open, choice, extra]);

  function close() {
    setTyped("");
    setError(null);
    onClose();
  }

  const name = preview?.cluster || cluster;
  const ready = canStartCARotation(preview, typed);

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready) return;
    setBusy(true);
    setError(null);
    try {
      const res = await kind.start(typed.trim(), choice, extra);
      close();
      navigate(`/operations/${encodeURIComponent(res.operation?.name ?? "")}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog open={open} onClose={close} title={`Rotate the ${kind.what} of cluster ${name}?`} description={kind.description}>
      <form onSubmit={submit} class="flex flex-col gap-3" data-testid={`${kind.id}-dialog`}>
        <fieldset class="flex flex-col gap-1 text-sm">
          <legend class="font-semibold">{kind.what === "CAs" ? "CAs" : "Keys"} to rotate</legend>
          {kind.choices.map(([value, label]) => (
            <label key={value} class="flex items-center gap-2">
              <input type="radio" name={`${kind.id}-choice`} value={value} checked={choice === value} onChange={() => setChoice(value)} data-testid={`${kind.id}-${value}`} />
              {label}
            </label>
          ))}
          {kind.extra && (
            <label class="mt-1 flex items-center gap-2">
              <input type="checkbox" checked={extra} onChange={() => setExtra(!extra)} data-testid={`${kind.id}-extra`} />
              {kind.extra}
            </label>
          )}
        </fieldset>
        <ErrorAlert error={previewError} what={`Planning the rotation of the ${kind.what}`} />
        <Loading when={!preview && !previewError} />
        {preview && (
          <div class="flex flex-col gap-3 text-sm">
            <RefusalList refusals={preview.refusals ?? []} title={`The checks refuse a rotation of the ${kind.what} now`} testid={`${kind.id}-refusals`} />
            <div>
              <p class="font-semibold">Stages</p>
              <ol class="mt-1 list-decimal space-y-1 pl-5 text-muted-foreground" data-testid={`${kind.id}-steps`}>
                {(preview.steps ?? []).map((s, i) => (
                  <li key={i}>{s}</li>
                ))}
              </ol>
            </div>
          </div>
        )}
        {preview?.allowed && (
          <Field id={`${kind.id}-confirm`} label={`Type ${name} to confirm`}>
            <Input id={`${kind.id}-confirm`} value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
          </Field>
        )}
        <ErrorAlert error={error} what={`Rotating the ${kind.what} of cluster ${name}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" variant="destructive" disabled={!ready || busy} data-testid={`${kind.id}-start`}>
            {busy ? "Starting…" : `Rotate ${kind.what}`}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

/**
 * RotateCADialog starts a CA rotation (PreviewCARotation, StartCARotation);
 * the operation's page then holds the credential hand-over card.
 */
export function RotateCADialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const kind: RotationKind<CAChoice> = {
    id: "rotate-ca",
    what: "CAs",
    description: <>In Talos's stages, applied live with no reboot. Talosconfigs and kubeconfigs of the old CAs stop working at the end: you download new ones on the way.</>,
    choices: [
      ["both", "The Talos API CA and the Kubernetes CA"],
      ["talos", "The Talos API CA alone"],
      ["kubernetes", "The Kubernetes CA alone"],
    ],
    extra: "Also the Kubernetes aggregator CA (front proxy)",
    preview: (c, aggregator) => client.previewCARotation({ ...caChoiceArgs(c), aggregator }),
    start: (confirm, c, aggregator) => client.startCARotation({ body: { confirmClusterName: confirm, ...caChoiceArgs(c), aggregator } }),
  };
  return <RotateDialog kind={kind} cluster={cluster} open={open} onClose={onClose} />;
}

/** Which keys the key-rotation dialog rotates. */
export type KeyChoice = "both" | "service-account" | "secretbox";

/** keyChoiceArgs is the request's service_account_only / secretbox_only for a choice. */
export function keyChoiceArgs(c: KeyChoice): { serviceAccountOnly: boolean; secretboxOnly: boolean } {
  return { serviceAccountOnly: c === "service-account", secretboxOnly: c === "secretbox" };
}

/** RotateKeysDialog starts a key rotation (PreviewKeyRotation, StartKeyRotation). */
export function RotateKeysDialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const kind: RotationKind<KeyChoice> = {
    id: "rotate-keys",
    what: "keys",
    description: (
      <>
        Applied live to the control planes with no reboot. Every Secret is written again with the new secretbox key; service-account tokens of the old key stop working
        once the pods hold new ones (an hour by default).
      </>
    ),
    choices: [
      ["both", "The service-account key and the secretbox key"],
      ["service-account", "The service-account signing key alone"],
      ["secretbox", "The secretbox key alone"],
    ],
    preview: (c) => client.previewKeyRotation(keyChoiceArgs(c)),
    start: (confirm, c) => client.startKeyRotation({ body: { confirmClusterName: confirm, ...keyChoiceArgs(c) } }),
  };
  return <RotateDialog kind={kind} cluster={cluster} open={open} onClose={onClose} />;
}

/** RotateCAControl is the Overview header's Rotate CAs…, for those who may write (the backend and the webhook check the verb). */
export function RotateCAControl() {
  const { client, cluster, canWrite } = useConsole();
  const [open, setOpen] = useState(false);
  if (!canWrite || !cluster?.name) return null;
  return (
    <>
      <Button variant="outline" onClick={() => setOpen(true)} data-testid="rotate-ca-open" aria-label={`Rotate CAs of cluster ${cluster.name}…`}>
        Rotate CAs…
      </Button>
      {open && <RotateCADialog client={client} cluster={cluster.name} open={open} onClose={() => setOpen(false)} />}
    </>
  );
}

/** RotateKeysControl is the Overview header's Rotate keys…, for those who may write (the backend and the webhook check the verb). */
export function RotateKeysControl() {
  const { client, cluster, canWrite } = useConsole();
  const [open, setOpen] = useState(false);
  if (!canWrite || !cluster?.name) return null;
  return (
    <>
      <Button variant="outline" onClick={() => setOpen(true)} data-testid="rotate-keys-open" aria-label={`Rotate keys of cluster ${cluster.name}…`}>
        Rotate keys…
      </Button>
      {open && <RotateKeysDialog client={client} cluster={cluster.name} open={open} onClose={() => setOpen(false)} />}
    </>
  );
}

/** handsOutCredentials: a ca-rotation past its first stages that has not ended hands credentials out. */
export function handsOutCredentials(op: Operation): boolean {
  if (op.type !== api.OperationCARotation || op.completedAt) return false;
  if (op.phase === api.OperationAwaitingCredentials) return true;
  return ["issue", "root-ca", "drop", "restart-clients", "finish"].includes(op.step ?? "");
}

/** decodeBytes turns a JSON-mapped protobuf bytes field (base64) into bytes. */
export function decodeBytes(b64?: string): Uint8Array<ArrayBuffer> {
  const bin = atob(b64 ?? "");
  const out = new Uint8Array(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * RotationCredentialsCard is the operation page's hand-over: while a CA
 * rotation waits in AwaitingCredentials (and until it ends), an
 * administrator downloads an os:admin talosconfig and an admin kubeconfig of
 * the new CAs. The backend makes the key pair and asks the controller as the
 * user; the controller records a Warning Event naming them, and the rotation
 * goes on once the first one is signed.
 */
export function RotationCredentialsCard({ op, cluster }: { op: Operation; cluster: string }) {
  const { client } = useConsole();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [got, setGot] = useState<DownloadRotationCredentialsResponse | null>(null);
  if (!handsOutCredentials(op)) return null;

  async function download() {
    setBusy(true);
    setError(null);
    try {
      const res = await client.downloadRotationCredentials({ body: { operation: op.name ?? "" } });
      saveFile({ blob: new Blob([decodeBytes(res.talosconfig)], { type: "application/yaml" }), filename: `${cluster}-talosconfig` });
      saveFile({ blob: new Blob([decodeBytes(res.kubeconfig)], { type: "application/yaml" }), filename: `${cluster}-kubeconfig` });
      setGot(res);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  const waiting = op.phase === api.OperationAwaitingCredentials;
  return (
    <Card>
      <CardHeader>
        <CardTitle>Credentials of the new CAs</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3 text-sm" data-testid="rotation-credentials">
        {waiting ? (
          <Alert tone="warn" title="The rotation waits for you">
            Every node accepts the new CAs. Before the servers switch to them, download a talosconfig and a kubeconfig of the new CAs: they work with the old CAs too
            until those are dropped, and go on working after. The rotation goes on once they are signed.
          </Alert>
        ) : (
          <p>The rotation goes on; another administrator may still download credentials of the new CAs until it ends.</p>
        )}
        <p class="text-muted-foreground">
          Needs <span class="font-mono">download</span> on <span class="font-mono">talosclusters/credentials</span>; the cluster records a Warning Event naming you.
        </p>
        <ErrorAlert error={error} what="Downloading the credentials of the new CAs" />
        {got && (
          <Alert tone="info" title="Downloaded">
            <span data-testid="rotation-credentials-done">
              {cluster}-talosconfig and {cluster}-kubeconfig, valid until {got.expiresAt ?? "unknown"} (TalosCredentialRequest {got.request}).
            </span>
          </Alert>
        )}
        <div>
          <Button onClick={download} disabled={busy} data-testid="rotation-credentials-download">
            {busy ? "Waiting for the controller…" : "Download talosconfig and kubeconfig"}
          </Button>
        </div>
      </CardContent>
    </Card>
  );
}
