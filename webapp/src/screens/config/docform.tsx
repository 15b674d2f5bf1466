import { useState } from "preact/hooks";
import { Badge } from "../../components/ui/badge";
import { Button } from "../../components/ui/button";
import { Checkbox, Field as FormField, Input, Select } from "../../components/ui/input";
import {
  classText,
  display,
  emptyOf,
  fields,
  get,
  parse,
  pathKey,
  set,
  type Field,
  type FormOptions,
  type Json,
  type KindSchema,
} from "../../lib/configform";

/** firstParagraph is the hint under a control; the whole text is its title. */
function firstParagraph(doc: string | undefined): string {
  return (doc ?? "").split("\n\n")[0];
}

/** idOf is a control's id: the document's index and the field's path. */
function idOf(prefix: string, f: Field): string {
  return `${prefix}-${f.path.join("-")}`.replace(/[^A-Za-z0-9_-]/g, "_");
}

/** Marks are a field's badges: privileged (with why), and what a change needs when it is more than a live apply. */
function Marks({ f }: { f: Field }) {
  const c = classText(f.cls);
  return (
    <>
      {f.privileged && (
        <Badge tone="warn" class="ml-1" title={`Privileged: ${f.privileged}. Writing it needs update on talosconfigpatches/privileged.`}>
          privileged
        </Badge>
      )}
      {c && f.node.class && (
        <Badge tone="neutral" class="ml-1" title="What a change of this field needs to reach a node">
          {c}
        </Badge>
      )}
    </>
  );
}

interface Props {
  kind: KindSchema;
  /** The document's body (the value under the kind's key). */
  value: Json | undefined;
  onChange: (v: Json | undefined) => void;
  options: FormOptions;
  readOnly: boolean;
  /** Prefix of the control ids, unique per document. */
  idPrefix: string;
  /** machinery's errors by field (pathKey). */
  errors: Record<string, string[]>;
}

/** DocumentForm is the form of one document, generated from the typed schema (src/lib/configform.ts). */
export function DocumentForm(p: Props) {
  const fs = fields(p.kind, p.value, p.options);
  return (
    <div class="flex flex-col gap-3" data-kind={p.kind.kind}>
      {fs.map((f) => (
        <FieldView key={pathKey(f.path)} f={f} {...p} />
      ))}
    </div>
  );
}

function FieldView(p: Props & { f: Field }) {
  const { f } = p;
  const v = get(p.value, f.path);
  const change = (x: Json | undefined) => p.onChange(set(p.value, f.path, x));
  switch (f.kind) {
    case "leaf":
      return <Leaf {...p} v={v} change={change} />;
    case "object":
      return (
        <details class="rounded-md border p-3" open={v !== undefined} data-field={f.schemaPath}>
          <summary class="cursor-pointer text-sm font-medium">
            {f.name}
            <Marks f={f} />
            {f.node.doc && <span class="ml-2 text-xs font-normal text-muted-foreground">{firstParagraph(f.node.doc).split("\n")[0]}</span>}
          </summary>
          <div class="mt-3 flex flex-col gap-3">
            {(f.children ?? []).map((c) => (
              <FieldView key={pathKey(c.path)} {...p} f={c} />
            ))}
          </div>
        </details>
      );
    case "list":
      return <ListView {...p} v={v} change={change} />;
    case "map":
      return <MapView {...p} v={v} change={change} />;
  }
}

function Leaf(p: Props & { f: Field; v: Json | undefined; change: (x: Json | undefined) => void }) {
  const { f } = p;
  const id = idOf(p.idPrefix, f);
  const [error, setError] = useState<string | undefined>(undefined);
  const shown = display(f.node, p.v);
  const errs = [...(error ? [error] : []), ...(p.errors[pathKey(f.path)] ?? [])];
  const label = typeof f.path[f.path.length - 1] === "number" ? `${f.name}.` : f.name;
  const commit = (input: string | boolean) => {
    const r = parse(f.node, input);
    setError(r.error);
    if (!r.error) p.change(r.value);
  };
  if (f.control === "presence") {
    return (
      <div data-field={f.schemaPath}>
        <Checkbox id={id} checked={shown === true} onChange={(e) => !p.readOnly && commit(e.currentTarget.checked)} label={<>{label} (set)<Marks f={f} /></>} error={errs.join("; ") || undefined} />
      </div>
    );
  }
  const hint = (
    <span title={f.node.doc}>
      {firstParagraph(f.node.doc)}
      <Marks f={f} />
    </span>
  );
  let control;
  if (f.control === "select" || f.control === "bool") {
    const options = f.control === "bool" ? ["true", "false"] : [...(f.node.enum ?? [])];
    if (typeof shown === "string" && shown !== "" && !options.includes(shown)) options.push(shown);
    control = (
      <Select id={id} value={shown as string} disabled={p.readOnly} onChange={(e) => commit(e.currentTarget.value)}>
        <option value="">(not set)</option>
        {options.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </Select>
    );
  } else {
    control = (
      <Input
        id={id}
        value={shown as string}
        inputMode={f.control === "number" ? "numeric" : undefined}
        placeholder={f.node.type === "intOrString" ? "a number or a name" : undefined}
        disabled={p.readOnly}
        onChange={(e) => commit(e.currentTarget.value)}
      />
    );
  }
  return (
    <div data-field={f.schemaPath}>
      <FormField id={id} label={label} hint={hint} error={errs.join("; ") || undefined}>
        {control}
      </FormField>
    </div>
  );
}

function ListView(p: Props & { f: Field; v: Json | undefined; change: (x: Json | undefined) => void }) {
  const { f } = p;
  const list = Array.isArray(p.v) ? p.v : [];
  return (
    <fieldset class="rounded-md border p-3" data-field={f.schemaPath}>
      <legend class="px-1 text-sm font-medium">
        {f.name}
        <Marks f={f} />
      </legend>
      {f.node.doc && <p class="mb-2 text-xs text-muted-foreground" title={f.node.doc}>{firstParagraph(f.node.doc)}</p>}
      <div class="flex flex-col gap-2">
        {(f.children ?? []).map((c, i) => (
          <div key={pathKey(c.path)} class="flex items-start gap-2">
            <div class="min-w-0 flex-1">
              <FieldView {...p} f={c} />
            </div>
            {!p.readOnly && (
              <Button variant="ghost" size="sm" aria-label={`Remove ${f.name} ${i + 1}`} onClick={() => p.change(list.length > 1 ? list.filter((_, j) => j !== i) : undefined)}>
                Remove
              </Button>
            )}
          </div>
        ))}
      </div>
      {!p.readOnly && (
        <Button variant="outline" size="sm" class="mt-2" data-testid={`add-${f.schemaPath}`} onClick={() => p.change([...list, emptyOf(f.node.items!)])}>
          Add to {f.name}
        </Button>
      )}
    </fieldset>
  );
}

function MapView(p: Props & { f: Field; v: Json | undefined; change: (x: Json | undefined) => void }) {
  const { f } = p;
  const m = p.v && typeof p.v === "object" && !Array.isArray(p.v) ? p.v : {};
  const [key, setKey] = useState("");
  const listId = `${idOf(p.idPrefix, f)}-keys`;
  const addId = `${idOf(p.idPrefix, f)}-new`;
  return (
    <fieldset class="rounded-md border p-3" data-field={f.schemaPath}>
      <legend class="px-1 text-sm font-medium">
        {f.name}
        <Marks f={f} />
      </legend>
      {f.node.doc && <p class="mb-2 text-xs text-muted-foreground" title={f.node.doc}>{firstParagraph(f.node.doc)}</p>}
      <div class="flex flex-col gap-2">
        {(f.children ?? []).map((c) => (
          <div key={pathKey(c.path)} class="flex items-start gap-2">
            <div class="min-w-0 flex-1">
              <FieldView {...p} f={c} />
            </div>
            {!p.readOnly && (
              <Button
                variant="ghost"
                size="sm"
                aria-label={`Remove ${c.name}`}
                onClick={() => {
                  const next = { ...m };
                  delete next[c.name];
                  p.change(Object.keys(next).length ? next : undefined);
                }}
              >
                Remove
              </Button>
            )}
          </div>
        ))}
      </div>
      {!p.readOnly && (
        <div class="mt-2 flex items-end gap-2">
          <FormField id={addId} label={`New key of ${f.name}`} class="flex-1">
            <Input id={addId} value={key} list={f.node.keys?.length ? listId : undefined} onInput={(e) => setKey(e.currentTarget.value)} />
          </FormField>
          {!!f.node.keys?.length && (
            <datalist id={listId}>
              {f.node.keys.map((k) => (
                <option key={k} value={k} />
              ))}
            </datalist>
          )}
          <Button
            variant="outline"
            size="sm"
            disabled={!key.trim() || key.trim() in m}
            data-testid={`add-${f.schemaPath}`}
            onClick={() => {
              p.change({ ...m, [key.trim()]: emptyOf(f.node.values!) });
              setKey("");
            }}
          >
            Add key
          </Button>
        </div>
      )}
    </fieldset>
  );
}
