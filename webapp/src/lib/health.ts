import { useEffect, useState } from "preact/hooks";
import type { Client, GetClusterHealthResponse } from "../api/generated";
import { pollMs } from "./connection";

type Tone = "ok" | "warn" | "bad" | "neutral";
/** Figure is one health tile: its value, tone and the sentence under it. */
export interface Figure {
  value: string;
  tone: Tone;
  detail: string;
}

const unknown: Figure = { value: "…", tone: "neutral", detail: "Reading the control planes" };

/** etcdSummary: healthy voting members over all, and whether they make quorum. */
export function etcdSummary(h: GetClusterHealthResponse | null): Figure {
  if (!h) return unknown;
  const e = h.etcd ?? {};
  if (e.error) return { value: "—", tone: "bad", detail: e.error };
  const voters = (e.members ?? []).filter((m) => !m.learner).length;
  const learners = (e.members ?? []).length - voters;
  const healthy = e.healthy ?? 0;
  const detail = `${e.hasQuorum ? "Quorum held" : "Quorum lost"}: ${healthy} healthy of ${voters} voting, ${e.quorum ?? 0} needed${learners ? `; ${learners} learner${learners === 1 ? "" : "s"}` : ""}`;
  return { value: `${healthy} / ${voters}`, tone: !e.hasQuorum ? "bad" : healthy < voters ? "warn" : "ok", detail };
}

/** apiServersSummary: kube-apiservers ready over control planes, naming those not ready. */
export function apiServersSummary(h: GetClusterHealthResponse | null): Figure {
  if (!h) return unknown;
  const cps = h.controlPlanes ?? [];
  const down = cps.filter((c) => !c.apiServerReady);
  if (cps.length === 0) return { value: "0", tone: "neutral", detail: "No control plane is approved yet" };
  return {
    value: `${cps.length - down.length} / ${cps.length}`,
    tone: down.length === 0 ? "ok" : down.length === cps.length ? "bad" : "warn",
    detail: down.length === 0 ? "Every control plane's /readyz answers ok" : `Not ready: ${down.map((c) => c.machine).join(", ")}`,
  };
}

/** skewed: whether the nodes run the declared Talos and Kubernetes versions. */
export function skewed(h: GetClusterHealthResponse | null): Figure {
  if (!h) return unknown;
  const off = (h.nodes ?? []).filter((n) => n.skewed);
  if (!h.versionSkew) return { value: "None", tone: "ok", detail: `Talos ${h.talosVersion || "—"}, Kubernetes ${h.kubernetesVersion || "—"} on every node that reports` };
  return {
    value: off.length ? `${off.length} node${off.length === 1 ? "" : "s"}` : "Mixed",
    tone: "warn",
    detail: off.length ? off.map((n) => `${n.machine} runs Talos ${n.talosVersion || "?"}${n.kubeletVersion ? `, kubelet ${n.kubeletVersion}` : ""}`).join("; ") : "The nodes run more than one version",
  };
}

/** certificatesSummary: the earliest expiry status records, or what it does not record. */
export function certificatesSummary(h: GetClusterHealthResponse | null, now: number): Figure {
  if (!h) return unknown;
  const certs = (h.certificates ?? []).filter((c) => c.expiresAt).sort((a, b) => Date.parse(a.expiresAt ?? "") - Date.parse(b.expiresAt ?? ""));
  if (certs.length === 0) return { value: "Not recorded", tone: "neutral", detail: h.certificatesMissing || "The cluster's status records no certificate expiry" };
  const first = certs[0];
  const days = Math.floor((Date.parse(first.expiresAt ?? "") - now) / 86400000);
  const detail = `${first.name} expires ${first.expiresAt?.slice(0, 10)}${h.certificatesMissing ? `. ${h.certificatesMissing}` : ""}`;
  return { value: days < 0 ? "Expired" : `${days} days`, tone: days < 0 ? "bad" : days < 30 ? "warn" : "ok", detail };
}

/** useHealth reads the control plane's health now and every few polls (each read asks every control plane). */
export function useHealth(client: Client): { health: GetClusterHealthResponse | null; error: unknown } {
  const [health, setHealth] = useState<GetClusterHealthResponse | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let stop = false;
    const load = () =>
      client.getClusterHealth().then(
        (r) => {
          if (stop) return;
          setHealth(r);
          setError(null);
        },
        (e) => !stop && setError(e),
      );
    load();
    const t = setInterval(load, pollMs * 3);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [client]);
  return { health, error };
}
