import { useEffect, useState } from "preact/hooks";
import type { Authentication, GetAuthenticationResponse } from "../api/generated";
import { useConsole } from "../context";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Checkbox, Field, Input, Textarea } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { ErrorAlert } from "../components/errors";
import { ConfigRolloutDialog } from "./rollout";

/** The form's fields: the external provider as text, audiences comma-separated. */
export interface AuthForm {
  ichorUsers: boolean;
  issuerUrl: string;
  audiences: string;
  usernameClaim: string;
  groupsClaim: string;
  certificateAuthority: string;
}

export function authFormOf(a: Authentication | undefined): AuthForm {
  const e = a?.external;
  return {
    ichorUsers: !!a?.ichorUsers,
    issuerUrl: e?.issuerUrl ?? "",
    audiences: (e?.audiences ?? []).join(", "),
    usernameClaim: e?.usernameClaim ?? "",
    groupsClaim: e?.groupsClaim ?? "",
    certificateAuthority: e?.certificateAuthority ?? "",
  };
}

/**
 * authenticationOf is the request for a form: no external provider when its
 * issuer URL is empty. A provider without an audience is a form error (the
 * API would refuse it too); it is returned as a string.
 */
export function authenticationOf(f: AuthForm): Authentication | string {
  const issuerUrl = f.issuerUrl.trim();
  if (issuerUrl === "") return { ichorUsers: f.ichorUsers };
  const audiences = f.audiences
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
  if (audiences.length === 0) return "Name at least one audience: the client ID whose ID tokens the kube-apiserver accepts.";
  return {
    ichorUsers: f.ichorUsers,
    external: {
      issuerUrl,
      audiences,
      usernameClaim: f.usernameClaim.trim() || undefined,
      groupsClaim: f.groupsClaim.trim() || undefined,
      certificateAuthority: f.certificateAuthority.trim() || undefined,
    },
  };
}

function same(a: AuthForm, b: AuthForm): boolean {
  return (Object.keys(a) as (keyof AuthForm)[]).every((k) => a[k] === b[k]);
}

/**
 * AuthenticationCard is spec.authentication: whom the cluster's
 * kube-apiserver accepts ID tokens from (ichor-ui's issuer for `ichor auth
 * token`, an external provider). Admins change it (the write is theirs, as
 * `ichor cluster authentication set`); the control planes then wait for a
 * kube-apiserver restart, which the card offers to roll out.
 */
export function AuthenticationCard() {
  const { client, cluster, canWrite } = useConsole();
  const [read, setRead] = useState<GetAuthenticationResponse | undefined>(undefined);
  const [form, setForm] = useState<AuthForm>(authFormOf(undefined));
  const [loadError, setLoadError] = useState<unknown>(null);
  const [saveError, setSaveError] = useState<unknown>(null);
  const [formError, setFormError] = useState("");
  const [saved, setSaved] = useState("");
  const [busy, setBusy] = useState(false);
  const [rollout, setRollout] = useState(false);

  useEffect(() => {
    client.getAuthentication().then(
      (r) => {
        setRead(r);
        setForm(authFormOf(r.authentication));
        setLoadError(null);
      },
      (e) => setLoadError(e),
    );
  }, [client]);

  const editable = !!read?.canWrite;
  const changed = !!read && !same(form, authFormOf(read.authentication));
  const set = (k: keyof AuthForm) => (e: { currentTarget: HTMLInputElement | HTMLTextAreaElement }) => {
    setSaved("");
    setFormError("");
    setForm({ ...form, [k]: k === "ichorUsers" ? (e.currentTarget as HTMLInputElement).checked : e.currentTarget.value });
  };

  const save = async (e: Event) => {
    e.preventDefault();
    const body = authenticationOf(form);
    if (typeof body === "string") {
      setFormError(body);
      return;
    }
    setBusy(true);
    setSaveError(null);
    try {
      const r = await client.updateAuthentication({ body: { authentication: body } });
      setRead(r.current);
      setForm(authFormOf(r.current?.authentication));
      setSaved(r.changed ? "Saved. The control planes now wait for a kube-apiserver restart." : "Nothing changed.");
    } catch (err) {
      setSaveError(err);
    } finally {
      setBusy(false);
    }
  };

  const pending = read?.restartPending ?? [];
  return (
    <Card>
      <CardHeader>
        <CardTitle>Cluster authentication</CardTitle>
        <CardDescription>Whose ID tokens the cluster's kube-apiserver accepts, so kubectl works per user with RBAC and audit.</CardDescription>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={loadError} what="Reading the cluster's authentication" />
        {read && !editable && (
          <p class="mb-3 text-sm text-muted-foreground" data-testid="auth-viewer">
            Only an Ichor admin changes the cluster's authentication.
          </p>
        )}
        {read && (
          <form class="flex max-w-xl flex-col gap-4" onSubmit={save} aria-label="Cluster authentication">
            <Checkbox
              id="auth-ichor-users"
              checked={form.ichorUsers}
              onChange={editable ? set("ichorUsers") : () => {}}
              label={
                <>
                  Ichor's users: accept the tokens of <code>ichor auth token</code> (users ichor:&lt;name&gt;)
                  {!read.issuerPublished && " — needs Ichor's users on (ichor init --ui-url)"}
                </>
              }
            />
            <Field id="auth-issuer" label="External provider's issuer URL" hint="An https URL the control planes reach; empty: no external provider.">
              <Input id="auth-issuer" value={form.issuerUrl} disabled={!editable} placeholder="https://login.example.com/realms/main" onInput={set("issuerUrl")} aria-describedby="auth-issuer-hint" />
            </Field>
            <Field id="auth-audiences" label="Audiences" hint="The client IDs whose ID tokens are accepted, comma-separated.">
              <Input id="auth-audiences" value={form.audiences} disabled={!editable} onInput={set("audiences")} aria-describedby="auth-audiences-hint" />
            </Field>
            <Field id="auth-username-claim" label="Username claim" hint="The claim naming the user (oidc:<claim>). Empty: sub.">
              <Input id="auth-username-claim" value={form.usernameClaim} disabled={!editable} placeholder="sub" onInput={set("usernameClaim")} aria-describedby="auth-username-claim-hint" />
            </Field>
            <Field id="auth-groups-claim" label="Groups claim" hint="The claim listing the user's groups (oidc:<group>). Empty: none.">
              <Input id="auth-groups-claim" value={form.groupsClaim} disabled={!editable} onInput={set("groupsClaim")} aria-describedby="auth-groups-claim-hint" />
            </Field>
            <Field id="auth-ca" label="Provider's CA (PEM)" hint="The CA bundle of the provider's certificate. Empty: the nodes' trusted roots.">
              <Textarea id="auth-ca" rows={3} value={form.certificateAuthority} disabled={!editable} onInput={set("certificateAuthority")} aria-describedby="auth-ca-hint" />
            </Field>
            {formError && (
              <p class="text-sm text-destructive-foreground" role="alert" data-testid="auth-form-error">
                {formError}
              </p>
            )}
            {editable && (
              <div class="flex items-center gap-3">
                <Button type="submit" disabled={busy || !changed} data-testid="auth-save">
                  Save
                </Button>
                {saved && (
                  <span class="text-sm text-muted-foreground" role="status">
                    {saved}
                  </span>
                )}
              </div>
            )}
            <ErrorAlert error={saveError} what="Saving the cluster's authentication" />
          </form>
        )}
        {pending.length > 0 && (
          <Alert tone="info" title="Waiting for a kube-apiserver restart" class="mt-4 text-sm">
            <span data-testid="auth-pending">
              {pending.join(", ")} still run{pending.length === 1 ? "s" : ""} the previous configuration. A config rollout restarts their kube-apiservers one at a time (
              <code>ichor config apply</code>).
            </span>{" "}
            {canWrite && !!cluster?.name && (
              <button type="button" class="underline" onClick={() => setRollout(true)}>
                Roll it out
              </button>
            )}
          </Alert>
        )}
        {rollout && <ConfigRolloutDialog client={client} cluster={cluster?.name ?? ""} open={rollout} onClose={() => setRollout(false)} />}
      </CardContent>
    </Card>
  );
}
