import { describe, expect, it } from "vitest";
import schemaJson from "../api/configschema.json";
import {
  display,
  documentsOf,
  fields,
  formOfPatch,
  get,
  kindOf,
  kindsOffered,
  leaves,
  parse,
  placeErrors,
  patchOfForm,
  set,
  type ConfigSchema,
  type Field,
  type Json,
  type PatchDocument,
  type SchemaNode,
} from "./configform";

const schema = schemaJson as unknown as ConfigSchema;

/** sample fills every field of a node: each property, one list element, one map key. */
function sample(n: SchemaNode, depth = 0): Json {
  if (n.enum?.length) return n.enum[n.enum.length - 1];
  switch (n.type) {
    case "string":
      return n.pattern ? "512Mi" : `v${depth}`;
    case "integer":
      return Math.max(n.min ?? 0, Math.min(n.max ?? 100, 7));
    case "number":
      return 1.5;
    case "boolean":
      return depth % 2 === 0;
    case "intOrString":
      return 8080;
    case "array":
      return [sample(n.items!, depth + 1)];
    case "map":
      return { "key.one": sample(n.values!, depth + 1) };
    case "object": {
      const o: Record<string, Json> = {};
      for (const [k, c] of Object.entries(n.props ?? {})) o[k] = sample(c, depth + 1);
      return o;
    }
  }
  throw new Error(`no sample for type ${n.type}`);
}

/** throughForm rebuilds a document from its form alone: every leaf shown, read back as a person's input. */
function throughForm(fs: Field[], doc: Json): Json | undefined {
  let out: Json | undefined = undefined;
  for (const f of leaves(fs)) {
    const r = parse(f.node, display(f.node, get(doc, f.path)));
    expect(r.error, `${f.schemaPath}`).toBeUndefined();
    out = set(out, f.path, r.value);
  }
  return out;
}

describe("the generated schema", () => {
  it("holds the allow-list's kinds, each under its key of spec.documents[]", () => {
    expect(schema.kinds.length).toBeGreaterThan(60);
    for (const k of schema.kinds) expect(k.key[0]).toBe(k.key[0].toLowerCase());
    expect(schema.kinds.map((k) => k.kind)).toContain("SysctlConfig");
    expect(schema.kinds.map((k) => k.kind)).toContain("VLANConfig");
    // Denied kinds (secrets, topology, the legacy document) are not offered.
    for (const denied of ["v1alpha1", "KubeServiceAccountConfig", "WireguardConfig", "KubeProxyConfig"]) expect(schema.kinds.map((k) => k.kind)).not.toContain(denied);
  });
});

describe("forms of every kind of the allow-list", () => {
  for (const k of schema.kinds) {
    it(`${k.kind}: a full document round-trips through the form and the CR losslessly`, () => {
      const doc = sample(k.schema);
      const fs = fields(k, doc, { privileged: true });
      const back = throughForm(fs, doc) ?? {};
      expect(back).toEqual(doc);
      // And through the ConfigPatch's documentsJson, as the backend stores it.
      const stored = documentsOf(JSON.stringify([{ [k.key]: back }]));
      expect(kindOf(schema, stored[0])?.kind).toBe(k.kind);
      expect(stored[0][k.key]).toEqual(doc);
    });
    it(`${k.kind}: no form field is a secret field`, () => {
      const fs = fields(k, sample(k.schema), { privileged: true });
      const secrets = schema.secretFields.filter((s) => s.startsWith(`${k.kind}:`));
      const walk = (f: Field[]): string[] => f.flatMap((x) => [x.schemaPath, ...walk(x.children ?? [])]);
      for (const p of walk(fs)) for (const s of secrets) expect(p === s || p.startsWith(`${s}.`), `${p} is the secret ${s}`).toBe(false);
    });
  }
});

describe("privileged fields", () => {
  const kubelet = schema.kinds.find((k) => k.kind === "KubeletConfig")!;
  const roots = schema.kinds.find((k) => k.kind === "TrustedRootsConfig")!;
  it("are left out of the form and the kinds offered for a user without the verb", () => {
    const fs = leaves(fields(kubelet, sample(kubelet.schema), { privileged: false }));
    expect(fs.map((f) => f.schemaPath)).not.toContain("KubeletConfig:image");
    expect(fs.some((f) => f.privileged)).toBe(false);
    expect(fs.length).toBeGreaterThan(0);
    expect(kindsOffered(schema, { privileged: false }).map((k) => k.kind)).not.toContain("TrustedRootsConfig");
  });
  it("are shown and marked with the reason to a user who holds it", () => {
    const image = leaves(fields(kubelet, sample(kubelet.schema), { privileged: true })).find((f) => f.schemaPath === "KubeletConfig:image");
    expect(image?.privileged).toMatch(/image/);
    expect(kindsOffered(schema, { privileged: true })).toContain(roots);
    expect(leaves(fields(roots, sample(roots.schema), { privileged: true })).every((f) => !!f.privileged)).toBe(true);
  });
});

describe("controls", () => {
  it("keep a value outside the enum, an unset optional boolean, and refuse what the schema refuses", () => {
    const vlan = schema.kinds.find((k) => k.kind === "VLANConfig")!.schema;
    const mode = vlan.props!.vlanMode;
    expect(mode.enum).toContain("802.1q");
    expect(parse(mode, display(mode, "custom")).value).toBe("custom");
    const up = vlan.props!.up;
    expect(parse(up, display(up, undefined)).value).toBeUndefined();
    expect(parse(up, display(up, false)).value).toBe(false);
    expect(parse(vlan.props!.vlanID, "70000").error).toBe("at most 65535");
    expect(parse(vlan.props!.vlanID, "1.5").error).toBe("a whole number");
  });
  it("removes a list element and an emptied key", () => {
    expect(set({ a: [1, 2, 3] }, ["a", 1], undefined)).toEqual({ a: [1, 3] });
    expect(set({ a: { b: "x" }, c: 1 }, ["a", "b"], undefined)).toEqual({ a: {}, c: 1 });
  });
});

describe("the patch form", () => {
  it("round-trips a stored patch, a selector's matchExpressions kept", () => {
    const stored = {
      name: "tuning",
      layer: "selector",
      priority: 5,
      targetSelectorJson: JSON.stringify({ matchLabels: { zone: "a" }, matchExpressions: [{ key: "tier", operator: "In", values: ["db"] }] }),
      documentsJson: JSON.stringify([{ sysctlConfig: { params: { "vm.swappiness": "10" } } }]),
      resourceVersion: "42",
    };
    const { patch, errors } = patchOfForm(formOfPatch(stored));
    expect(errors).toEqual({});
    expect(JSON.parse(patch!.targetSelectorJson!)).toEqual(JSON.parse(stored.targetSelectorJson));
    expect(JSON.parse(patch!.documentsJson!)).toEqual(JSON.parse(stored.documentsJson));
    expect(patch!.priority).toBe(5);
    expect(patch!.resourceVersion).toBe("42");
  });
  it("names what is missing", () => {
    const { patch, errors } = patchOfForm({ name: "Bad_Name", layer: "role", priority: "2000", role: "", labels: "", machine: "", documents: [] });
    expect(patch).toBeUndefined();
    expect(Object.keys(errors).sort()).toEqual(["documents", "name", "priority", "role"]);
  });
});

describe("validation errors", () => {
  it("are placed on the field machinery names, in the document it names", () => {
    const docs: PatchDocument[] = [{ sysctlConfig: { params: { a: "1" } } }, { vlanConfig: { name: "eth0.10", vlanID: 10 } }];
    const { byDoc, rest } = placeErrors(schema, docs, ["VLANConfig/eth0.10: parent must be specified", "something else broke"], { privileged: false });
    expect(byDoc[1].fields["parent"]).toEqual(["parent must be specified"]);
    expect(byDoc[0]).toEqual({ fields: {}, document: [] });
    expect(rest).toEqual(["something else broke"]);
  });
});
