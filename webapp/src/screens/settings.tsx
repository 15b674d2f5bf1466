import { useEffect, useState } from "preact/hooks";
import type { Settings } from "../api/generated";
import { ApiError, Code } from "../api/errors";
import { useConsole } from "../context";
import { canAdmin, formOf, settingsUpdate, type SettingsForm } from "../lib/operations";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Field, Input, Select } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { ErrorAlert } from "../components/errors";
import { Detail } from "./overview";
import * as api from "../api/v1alpha1";
import { AuthenticationCard } from "./authentication";

const aborted = 10; // gRPC ABORTED: the settings changed since they were read.

export function SettingsPage() {
  const { client, me, cluster } = useConsole();
  const [read, setRead] = useState<Settings | undefined>(undefined);
  const [form, setForm] = useState<SettingsForm>(formOf(undefined));
  const [loadError, setLoadError] = useState<unknown>(null);
  const [saveError, setSaveError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState(false);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    client.getSettings().then(
      (r) => {
        setRead(r.settings);
        setForm(formOf(r.settings));
        setLoadError(null);
      },
      (e) => setLoadError(e),
    );
  }, [client, tick]);

  const editable = canAdmin(me?.groups) && !!read && !read.readOnly;
  const change = settingsUpdate(read, form);
  const set = (k: keyof SettingsForm) => (e: { currentTarget: HTMLInputElement | HTMLSelectElement }) => {
    setSaved(false);
    setForm({ ...form, [k]: e.currentTarget.value });
  };

  const save = async (e: Event) => {
    e.preventDefault();
    if (!change) return;
    setBusy(true);
    setSaveError(null);
    try {
      const r = await client.updateSettings({ body: change });
      setRead(r.settings);
      setForm(formOf(r.settings));
      setSaved(true);
    } catch (err) {
      setSaveError(err);
    } finally {
      setBusy(false);
    }
  };

  const stale = saveError instanceof ApiError && saveError.code === aborted;
  return (
    <>
      <h1 class="text-xl font-semibold">Settings</h1>
      <ErrorAlert error={loadError} what="Reading Ichor's settings" />
      {read?.readOnly && (
        <Alert tone="info" title="Read-only" class="text-sm">
          <span data-testid="settings-read-only">This ichor-ui runs with --settings-read-only: the console shows the settings but does not change them. Edit spec.settings of the IchorInstallation instead.</span>
        </Alert>
      )}
      {read && !read.readOnly && !editable && (
        <p class="text-sm text-muted-foreground" data-testid="settings-viewer">
          Only an Ichor admin changes these settings.
        </p>
      )}
      {read && (
        <Card>
          <CardHeader>
            <CardTitle>Runtime settings</CardTitle>
            <CardDescription>Read live by the controller, the webhooks and ichor-ui. An empty field is the default.</CardDescription>
          </CardHeader>
          <CardContent>
            <form class="flex max-w-xl flex-col gap-4" onSubmit={save} aria-label="Ichor settings">
              <Field id="id-token-lifetime" label="ID token lifetime" hint="How long the console's sign-in tokens last: 1m to 1h, as 5m or 1h. Empty: 5m.">
                <Input id="id-token-lifetime" value={form.idTokenLifetime} placeholder="5m (default)" disabled={!editable} onInput={set("idTokenLifetime")} aria-describedby="id-token-lifetime-hint" />
              </Field>
              <Field id="refresh-token-lifetime" label="Refresh token lifetime" hint="How long a signed-in session lasts without activity: 10m to 168h. Empty: 12h.">
                <Input id="refresh-token-lifetime" value={form.refreshTokenLifetime} placeholder="12h (default)" disabled={!editable} onInput={set("refreshTokenLifetime")} aria-describedby="refresh-token-lifetime-hint" />
              </Field>
              <Field id="default-drift-policy" label="Default drift policy" hint="For clusters that set none: Warn reports drift, AutoCorrect applies the configuration again.">
                <Select id="default-drift-policy" value={form.defaultDriftPolicy} disabled={!editable} onChange={set("defaultDriftPolicy")} aria-describedby="default-drift-policy-hint">
                  <option value="">Default ({api.DriftPolicyWarn})</option>
                  <option value={api.DriftPolicyWarn}>{api.DriftPolicyWarn}</option>
                  <option value={api.DriftPolicyAutoCorrect}>{api.DriftPolicyAutoCorrect}</option>
                </Select>
              </Field>
              {editable && (
                <div class="flex items-center gap-3">
                  <Button type="submit" disabled={busy || !change} data-testid="settings-save">
                    Save
                  </Button>
                  {saved && (
                    <span class="text-sm text-muted-foreground" role="status">
                      Saved.
                    </span>
                  )}
                </div>
              )}
              {stale ? (
                <Alert tone="warn" title="The settings changed meanwhile">
                  Someone saved them after you opened this page; nothing was changed.{" "}
                  <button type="button" class="underline" onClick={() => setTick((t) => t + 1)}>
                    Reload them
                  </button>{" "}
                  and make your change again.
                </Alert>
              ) : (
                <ErrorAlert error={saveError} what="Saving the settings" />
              )}
            </form>
          </CardContent>
        </Card>
      )}
      {read && (
        <Card>
          <dl class="grid grid-cols-1 gap-x-6 gap-y-2 p-4 text-sm sm:grid-cols-2">
            <Detail
              k="Installed Ichor release"
              v={read.installedVersion || (cluster?.ichorVersion ? `${cluster.ichorVersion} (as the cluster reports it; the installation has not recorded its release)` : "not reported yet")}
              mono
            />
            <Detail k="Console may change settings" v={read.readOnly ? "No (--settings-read-only)" : "Yes, for admins"} />
          </dl>
        </Card>
      )}
      <AuthenticationCard />
      {loadError instanceof ApiError && loadError.code === Code.NotFound && <p class="text-sm text-muted-foreground">Install Ichor with `ichor init` to create its settings.</p>}
    </>
  );
}
