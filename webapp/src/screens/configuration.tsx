import { useEffect, useMemo, useState } from "preact/hooks";
import type { ConfigPatch, ListPatchesResponse, PreviewPatchResponse } from "../api/generated";
import { ApiError } from "../api/errors";
import { useConsole } from "../context";
import { navigate } from "../lib/router";
import {
  formOfPatch,
  hidesPrivileged,
  kindOf,
  kindsOffered,
  layers,
  loadSchema,
  modeText,
  newForm,
  patchOfForm,
  placeErrors,
  type ConfigSchema,
  type FormOptions,
  type Json,
  type PatchForm,
} from "../lib/configform";
import * as api from "../api/v1alpha1";
import { Button, LinkButton } from "../components/ui/button";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Field, Input, Select } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { Dialog } from "../components/ui/dialog";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { ErrorAlert } from "../components/errors";
import { DocumentForm } from "./config/docform";

const aborted = 10; // gRPC ABORTED: the patch changed since it was read.

const layerTitles: Record<string, string> = {
  cluster: "Cluster layer: every machine",
  role: "Role layer: the machines of a role",
  selector: "Selector layer: the machines whose labels match",
  machine: "Machine layer: one machine",
};

/** targetText is a patch's target, for people. */
export function targetText(p: ConfigPatch): string {
  switch (p.layer) {
    case "role":
      return `role ${p.targetRole ?? ""}`;
    case "selector": {
      const s = p.targetSelectorJson ? (JSON.parse(p.targetSelectorJson) as { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] }) : {};
      const parts = [
        ...Object.entries(s.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`),
        ...(s.matchExpressions ?? []).map((e) => `${e.key} ${e.operator} (${(e.values ?? []).join(",")})`),
      ];
      return parts.join(", ") || "(no selector)";
    }
    case "machine":
      return `machine ${p.targetMachine ?? ""}`;
    default:
      return "every machine";
  }
}

/** ConfigurationPage is the cluster's TalosConfigPatches by layer, and their editor (route /configuration, /configuration/new, /configuration/patches/<name>). */
export function ConfigurationPage({ edit }: { edit?: string }) {
  const { client } = useConsole();
  const [list, setList] = useState<ListPatchesResponse | null>(null);
  const [listError, setListError] = useState<unknown>(null);
  const [schema, setSchema] = useState<ConfigSchema | null>(null);
  const [schemaError, setSchemaError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    loadSchema().then(setSchema, setSchemaError);
  }, []);
  useEffect(() => {
    client.listPatches().then(
      (r) => {
        setList(r);
        setListError(null);
      },
      (e) => setListError(e),
    );
  }, [client, tick]);
  const reload = () => setTick((t) => t + 1);

  if (edit !== undefined) {
    const existing = list?.patches?.find((p) => p.name === edit);
    return (
      <>
        {/* The heading is there from the start: the console moves focus to it on a new page. */}
        <div class="flex flex-wrap items-center justify-between gap-3">
          <h1 class="text-xl font-semibold">{edit ? `Patch ${edit}` : "New patch"}</h1>
          <LinkButton href="/configuration">Back to Configuration</LinkButton>
        </div>
        <ErrorAlert error={listError ?? schemaError} what="Reading the configuration patches" />
        {(!list || !schema) && !listError && !schemaError ? (
          <p class="text-sm text-muted-foreground" role="status" data-loading>
            Loading…
          </p>
        ) : edit !== "" && !existing && list ? (
          <Alert tone="warn" title={`No patch ${edit}`}>
            It may have been deleted. <a href="/configuration" class="underline">Back to Configuration</a>
          </Alert>
        ) : (
          list &&
          schema && (
            <PatchEditor
              key={edit || "new"}
              schema={schema}
              existing={existing}
              canWrite={!!list.canWrite}
              options={{ privileged: !!list.canWritePrivileged }}
              onSaved={() => {
                reload();
                navigate("/configuration");
              }}
            />
          )
        )}
      </>
    );
  }

  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-3">
        <h1 class="text-xl font-semibold">Configuration</h1>
        {list?.canWrite && (
          <LinkButton variant="default" href="/configuration/new">
            New patch
          </LinkButton>
        )}
      </div>
      <p class="text-sm text-muted-foreground">
        TalosConfigPatches apply bottom-up after Ichor's own system layer: cluster, role, selector, machine; within a layer, higher priority applies later. A node page's Configuration tab shows
        the effective values and where each came from.
      </p>
      <ErrorAlert error={listError} what="Listing the configuration patches" />
      {list && !list.canWrite && (
        <p class="text-sm text-muted-foreground" data-testid="config-viewer">
          You can read the patches; an operator or admin changes them.
        </p>
      )}
      {list &&
        layers.map((layer) => {
          const items = (list.patches ?? []).filter((p) => p.layer === layer);
          return (
            <Card key={layer} aria-labelledby={`layer-${layer}`}>
              <CardHeader>
                <CardTitle>
                  <span id={`layer-${layer}`}>{layerTitles[layer]}</span>
                </CardTitle>
              </CardHeader>
              <CardContent>
                {items.length === 0 ? (
                  <p class="text-sm text-muted-foreground">No patch in this layer.</p>
                ) : (
                  <PatchTable items={items} schema={schema} canWrite={!!list.canWrite} privileged={!!list.canWritePrivileged} label={`${layer} layer patches`} onDeleted={reload} />
                )}
              </CardContent>
            </Card>
          );
        })}
    </>
  );
}

function kindsText(schema: ConfigSchema | null, p: ConfigPatch): string {
  try {
    const docs = JSON.parse(p.documentsJson ?? "[]") as Record<string, Json>[];
    return docs.map((d) => (schema ? kindOf(schema, d)?.kind : undefined) ?? Object.keys(d)[0] ?? "?").join(", ");
  } catch {
    return "?";
  }
}

function PatchTable({ items, schema, canWrite, privileged, label, onDeleted }: { items: ConfigPatch[]; schema: ConfigSchema | null; canWrite: boolean; privileged: boolean; label: string; onDeleted: () => void }) {
  const [deleting, setDeleting] = useState<ConfigPatch | null>(null);
  return (
    <>
      <Table label={label}>
        <THead>
          <TR>
            <TH>Name</TH>
            <TH>Priority</TH>
            <TH>Target</TH>
            <TH>Documents</TH>
            <TH>Machines</TH>
            <TH>
              <span class="sr-only">Actions</span>
            </TH>
          </TR>
        </THead>
        <TBody>
          {items.map((p) => (
            <TR key={p.name} data-patch={p.name}>
              <TD label="Name">
                <a class="font-medium underline" href={`/configuration/patches/${encodeURIComponent(p.name ?? "")}`}>
                  {p.name}
                </a>
                {!!p.privilegedPaths?.length && (
                  <Badge tone="warn" class="ml-1" title={`Privileged: ${p.privilegedPaths.join(", ")}`}>
                    privileged
                  </Badge>
                )}
                {p.invalidMessage && (
                  <Badge tone="bad" class="ml-1" title={p.invalidMessage}>
                    invalid
                  </Badge>
                )}
              </TD>
              <TD label="Priority">{p.priority ?? 0}</TD>
              <TD label="Target">{targetText(p)}</TD>
              <TD label="Documents">{kindsText(schema, p)}</TD>
              <TD label="Machines">{p.matchedMachines ?? 0}</TD>
              <TD label="Actions">
                {canWrite && !hidesPrivileged(p, privileged) && (
                  <Button variant="outline" size="sm" data-testid={`delete-${p.name}`} onClick={() => setDeleting(p)}>
                    Delete
                  </Button>
                )}
              </TD>
            </TR>
          ))}
        </TBody>
      </Table>
      {deleting && (
        <DeleteDialog
          patch={deleting}
          onClose={(done) => {
            setDeleting(null);
            if (done) onDeleted();
          }}
        />
      )}
    </>
  );
}

function DeleteDialog({ patch, onClose }: { patch: ConfigPatch; onClose: (done: boolean) => void }) {
  const { client } = useConsole();
  const [preview, setPreview] = useState<PreviewPatchResponse | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    client.previewPatch({ body: { patch: { name: patch.name }, delete: true } }).then(setPreview, setError);
  }, [patch.name]);
  return (
    <Dialog open onClose={() => onClose(false)} title={`Delete patch ${patch.name}?`} description="The machines it targets lose what it sets. What each one needs:">
      {preview ? <Impact preview={preview} /> : !error && <p class="text-sm text-muted-foreground" role="status">Previewing…</p>}
      <ErrorAlert error={error} what="Deleting the patch" />
      <div class="flex justify-end gap-2">
        <Button variant="outline" onClick={() => onClose(false)}>
          Cancel
        </Button>
        <Button
          variant="destructive"
          disabled={busy || !preview}
          data-testid="delete-confirm"
          onClick={async () => {
            setBusy(true);
            setError(null);
            try {
              await client.deletePatch({ name: patch.name ?? "", body: { resourceVersion: patch.resourceVersion } });
              onClose(true);
            } catch (e) {
              setError(e);
            } finally {
              setBusy(false);
            }
          }}
        >
          Delete
        </Button>
      </div>
    </Dialog>
  );
}

/** Impact is the impact preview: per machine, how the change reaches it and the changed paths (never values). */
export function Impact({ preview }: { preview: PreviewPatchResponse }) {
  const machines = preview.machines ?? [];
  return (
    <div class="flex flex-col gap-2" data-testid="impact">
      {machines.length === 0 ? (
        <p class="text-sm text-muted-foreground">It targets no machine that has a role yet: nothing changes now.</p>
      ) : (
        <Table label="Impact per machine">
          <THead>
            <TR>
              <TH>Machine</TH>
              <TH>Mode</TH>
              <TH>Changed paths</TH>
            </TR>
          </THead>
          <TBody>
            {machines.map((m) => (
              <TR key={m.machine} data-machine={m.machine}>
                <TD label="Machine">
                  <span class="font-medium">{m.machine}</span> <span class="text-muted-foreground">({m.role})</span>
                </TD>
                <TD label="Mode" data-col="mode">
                  <span data-mode={m.errors?.length ? "invalid" : m.mode}>{m.errors?.length ? "invalid" : modeText(m.mode, m.waitsForRollout)}</span>
                  {m.waitsForRollout && (
                    <Badge tone="warn" class="ml-1">
                      rollout
                    </Badge>
                  )}
                </TD>
                <TD label="Changed paths">
                  <ul class="break-all font-mono text-xs">
                    {(m.changes ?? []).map((c) => (
                      <li key={c.path}>
                        {c.op} {c.path}
                      </li>
                    ))}
                  </ul>
                  {(m.errors ?? []).map((e) => (
                    <p key={e} class="text-xs font-medium text-destructive-foreground">
                      {e}
                    </p>
                  ))}
                </TD>
              </TR>
            ))}
          </TBody>
        </Table>
      )}
      {(preview.privileged ?? []).map((r) => (
        <Alert key={r.action} tone={preview.allowed ? "info" : "error"} title={preview.allowed ? "Privileged" : "Privileged: you may not write this"}>
          {r.action} needs {r.permission} (the ichor-admin role holds it).
        </Alert>
      ))}
    </div>
  );
}

/** PatchEditor creates or edits one patch through forms generated from the typed schema, previews its impact, and saves it. */
function PatchEditor({ schema, existing, canWrite, options, onSaved }: { schema: ConfigSchema; existing?: ConfigPatch; canWrite: boolean; options: FormOptions; onSaved: () => void }) {
  const { client, machines } = useConsole();
  const [form, setForm] = useState<PatchForm>(() => (existing ? formOfPatch(existing) : newForm()));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [preview, setPreview] = useState<PreviewPatchResponse | null>(null);
  const [previewed, setPreviewed] = useState<string>("");
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [saveError, setSaveError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [addKind, setAddKind] = useState("");
  const locked = hidesPrivileged(existing, options.privileged);
  const readOnly = !canWrite || locked;
  const offered = useMemo(() => kindsOffered(schema, options), [schema, options.privileged]);
  const current = patchOfForm(form);
  const state = JSON.stringify(current.patch ?? null);
  const upToDate = !!preview && previewed === state;
  const placed = useMemo(() => placeErrors(schema, form.documents, (preview?.machines ?? []).flatMap((m) => m.errors ?? []), options), [preview, form.documents]);

  const update = (f: Partial<PatchForm>) => {
    setForm({ ...form, ...f });
  };
  const runPreview = async () => {
    const r = patchOfForm(form);
    setErrors(r.errors);
    if (!r.patch) return;
    setPreviewError(null);
    setBusy(true);
    try {
      setPreview(await client.previewPatch({ body: { patch: r.patch } }));
      setPreviewed(JSON.stringify(r.patch));
    } catch (e) {
      setPreview(null);
      setPreviewError(e);
    } finally {
      setBusy(false);
    }
  };
  const save = async () => {
    if (!current.patch) return;
    setBusy(true);
    setSaveError(null);
    try {
      if (existing) await client.updatePatch({ name: existing.name ?? "", body: { patch: current.patch } });
      else await client.createPatch({ body: { patch: current.patch } });
      onSaved();
    } catch (e) {
      setSaveError(e);
    } finally {
      setBusy(false);
    }
  };
  const stale = saveError instanceof ApiError && saveError.code === aborted;

  return (
    <form
      class="flex flex-col gap-4"
      aria-label={existing ? `Patch ${existing.name}` : "New patch"}
      onSubmit={(e) => {
        e.preventDefault();
        void runPreview();
      }}
    >
      {locked && (
        <Alert tone="warn" title="Privileged patch" class="text-sm">
          It carries privileged configuration ({existing?.privilegedPaths?.join(", ")}); only a user with update on talosconfigpatches/privileged (the ichor-admin role) may see all of it or change it.
        </Alert>
      )}
      {existing?.invalidMessage && (
        <Alert tone="error" title="The controller cannot render this patch">
          {existing.invalidMessage}
        </Alert>
      )}
      <Card>
        <CardHeader>
          <CardTitle>Layer and target</CardTitle>
        </CardHeader>
        <CardContent class="grid grid-cols-1 gap-4 sm:grid-cols-2">
          <Field id="patch-name" label="Name" error={errors.name}>
            <Input id="patch-name" value={form.name} disabled={readOnly || !!existing} onInput={(e) => update({ name: e.currentTarget.value })} />
          </Field>
          <Field id="patch-layer" label="Layer">
            <Select id="patch-layer" value={form.layer} disabled={readOnly} onChange={(e) => update({ layer: e.currentTarget.value })}>
              {layers.map((l) => (
                <option key={l} value={l}>
                  {l}
                </option>
              ))}
            </Select>
          </Field>
          <Field id="patch-priority" label="Priority" hint="-1000 to 1000; within a layer, higher applies later. Empty is 0." error={errors.priority}>
            <Input id="patch-priority" value={form.priority} inputMode="numeric" disabled={readOnly} onInput={(e) => update({ priority: e.currentTarget.value })} />
          </Field>
          {form.layer === "role" && (
            <Field id="patch-role" label="Role" error={errors.role}>
              <Select id="patch-role" value={form.role} disabled={readOnly} onChange={(e) => update({ role: e.currentTarget.value })}>
                <option value="">(choose)</option>
                <option value={api.RoleControlPlane}>{api.RoleControlPlane}</option>
                <option value={api.RoleWorker}>{api.RoleWorker}</option>
              </Select>
            </Field>
          )}
          {form.layer === "selector" && (
            <Field id="patch-labels" label="Machine labels" hint="key=value,key=value: the TalosMachines whose labels all match." error={errors.labels}>
              <Input id="patch-labels" value={form.labels} disabled={readOnly} onInput={(e) => update({ labels: e.currentTarget.value })} />
            </Field>
          )}
          {form.layer === "machine" && (
            <Field id="patch-machine" label="Machine" error={errors.machine}>
              <Select id="patch-machine" value={form.machine} disabled={readOnly} onChange={(e) => update({ machine: e.currentTarget.value })}>
                <option value="">(choose)</option>
                {[...new Set([...machines.map((m) => m.name ?? ""), form.machine].filter(Boolean))].map((n) => (
                  <option key={n} value={n}>
                    {n}
                  </option>
                ))}
              </Select>
            </Field>
          )}
        </CardContent>
      </Card>

      {form.documents.map((d, i) => {
        const k = kindOf(schema, d);
        if (!k) {
          return (
            <Alert key={i} tone="warn" title={`Document ${i + 1}: ${Object.keys(d).join(", ")}`}>
              This console does not know this document kind; it is kept as it is.
            </Alert>
          );
        }
        const docErrors = placed.byDoc[i] ?? { fields: {}, document: [] };
        return (
          <Card key={`${i}-${k.key}`} data-document={k.kind}>
            <CardHeader>
              <div class="flex flex-wrap items-center justify-between gap-2">
                <CardTitle>
                  {k.kind}
                  {k.since && <span class="ml-2 text-xs font-normal text-muted-foreground">since Talos {k.since}</span>}
                  {k.schema.privileged && (
                    <Badge tone="warn" class="ml-2" title={k.schema.privileged}>
                      privileged
                    </Badge>
                  )}
                </CardTitle>
                {!readOnly && (
                  <Button variant="ghost" size="sm" onClick={() => update({ documents: form.documents.filter((_, j) => j !== i) })}>
                    Remove document
                  </Button>
                )}
              </div>
              {k.schema.privileged && <CardDescription>Privileged: {k.schema.privileged}.</CardDescription>}
            </CardHeader>
            <CardContent>
              {docErrors.document.map((e) => (
                <p key={e} class="mb-2 text-xs font-medium text-destructive-foreground" data-testid="field-error">
                  {e}
                </p>
              ))}
              <DocumentForm
                kind={k}
                value={d[k.key]}
                idPrefix={`doc${i}`}
                options={options}
                readOnly={readOnly}
                errors={docErrors.fields}
                onChange={(v) => update({ documents: form.documents.map((x, j) => (j === i ? { [k.key]: v ?? {} } : x)) })}
              />
            </CardContent>
          </Card>
        );
      })}
      {errors.documents && (
        <p class="text-sm font-medium text-destructive-foreground" data-testid="field-error">
          {errors.documents}
        </p>
      )}

      {!readOnly && (
        <div class="flex flex-wrap items-end gap-2">
          <Field id="add-kind" label="Add a document" class="w-72">
            <Select id="add-kind" value={addKind} onChange={(e) => setAddKind(e.currentTarget.value)}>
              <option value="">(choose a kind)</option>
              {offered.map((k) => (
                <option key={k.kind} value={k.kind}>
                  {k.kind}
                  {k.schema.privileged ? " (privileged)" : ""}
                </option>
              ))}
            </Select>
          </Field>
          <Button
            variant="outline"
            disabled={!addKind}
            data-testid="add-document"
            onClick={() => {
              const k = offered.find((x) => x.kind === addKind);
              if (k) update({ documents: [...form.documents, { [k.key]: {} }] });
              setAddKind("");
            }}
          >
            Add
          </Button>
        </div>
      )}

      {!readOnly && (
        <Card>
          <CardHeader>
            <CardTitle>Impact</CardTitle>
            <CardDescription>Every machine the patch targets, rendered before and after: what changes and how it reaches the node. Save after a preview of what you save.</CardDescription>
          </CardHeader>
          <CardContent class="flex flex-col gap-3">
            {preview && upToDate && <Impact preview={preview} />}
            {preview && !upToDate && <p class="text-sm text-muted-foreground">The form changed since the preview; preview again.</p>}
            {placed.rest.map((e) => (
              <p key={e} class="text-xs font-medium text-destructive-foreground">
                {e}
              </p>
            ))}
            <ErrorAlert error={previewError} what="Previewing the patch" />
            {stale ? (
              <Alert tone="warn" title="The patch changed meanwhile">
                Someone saved it after you opened it; nothing was changed. Go back to Configuration, open it again and make your change again.
              </Alert>
            ) : (
              <ErrorAlert error={saveError} what="Saving the patch" />
            )}
            <div class="flex gap-2">
              <Button type="submit" variant="outline" disabled={busy} data-testid="patch-preview">
                Preview
              </Button>
              <Button disabled={busy || !upToDate || !preview?.valid || !preview?.allowed} data-testid="patch-save" onClick={() => void save()}>
                {existing ? "Save changes" : "Create patch"}
              </Button>
            </div>
          </CardContent>
        </Card>
      )}
    </form>
  );
}
