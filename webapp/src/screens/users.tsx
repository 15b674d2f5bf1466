import { useEffect, useState } from "preact/hooks";
import type { Client, User } from "../api/generated";
import { ApiError } from "../api/errors";
import { useConsole } from "../context";
import { canAdmin } from "../lib/operations";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Checkbox, Field, Input } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { ErrorAlert } from "../components/errors";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import * as api from "../api/v1alpha1";

/** The roles an Ichor user may hold, each the group ichor:<role>. */
export const userRoles = [api.UserRoleViewer, api.UserRoleOperator, api.UserRoleAdmin] as const;

/** userNameProblem says what is wrong with a new user's name ("" when nothing): an IchorUser name. */
export function userNameProblem(name: string): string {
  if (!name) return "Name the user: lower-case letters, digits, '-' and '.'.";
  if (name.length > 253 || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name))
    return `"${name}" is not a user name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit.`;
  return "";
}

/** OneTimePassword shows a generated password once, with who it is for. */
function OneTimePassword({ user, password, onDone }: { user: string; password: string; onDone: () => void }) {
  return (
    <Alert tone="info" title={`The password of ${user}, shown once`}>
      <p class="text-sm">Give it to {user} now: it is not stored in clear and cannot be shown again.</p>
      <p class="my-2 break-all font-mono text-sm" data-testid="one-time-password">
        {password}
      </p>
      <Button size="sm" variant="outline" onClick={onDone} data-testid="one-time-password-done">
        Done
      </Button>
    </Alert>
  );
}

/** RoleBoxes edits a set of roles. */
function RoleBoxes({ id, roles, onChange }: { id: string; roles: string[]; onChange: (r: string[]) => void }) {
  return (
    <fieldset class="flex flex-wrap gap-4">
      <legend class="sr-only">Roles</legend>
      {userRoles.map((r) => (
        <Checkbox
          key={r}
          id={`${id}-${r}`}
          label={r}
          checked={roles.includes(r)}
          onChange={(e) => onChange(e.currentTarget.checked ? [...roles.filter((x) => x !== r), r] : roles.filter((x) => x !== r))}
        />
      ))}
    </fieldset>
  );
}

/** CreateUserCard creates a user with a generated password. */
function CreateUserCard({ client, onCreated }: { client: Client; onCreated: (name: string, password: string) => void }) {
  const [name, setName] = useState("");
  const [display, setDisplay] = useState("");
  const [roles, setRoles] = useState<string[]>([api.UserRoleViewer]);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const problem = name ? userNameProblem(name) : "";
  const submit = async (e: Event) => {
    e.preventDefault();
    if (userNameProblem(name) || roles.length === 0) return;
    setBusy(true);
    setError(null);
    try {
      const r = await client.createUser({ body: { name, displayName: display || undefined, roles } });
      onCreated(name, r.password ?? "");
      setName("");
      setDisplay("");
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <Card>
      <CardHeader>
        <CardTitle>Add a user</CardTitle>
        <CardDescription>The password is generated and shown once; the user signs in with it as ichor:&lt;name&gt;.</CardDescription>
      </CardHeader>
      <CardContent>
        <form class="flex max-w-xl flex-col gap-3" onSubmit={submit} aria-label="Add a user">
          <Field id="user-name" label="Name" error={problem}>
            <Input id="user-name" value={name} placeholder="alice" onInput={(e) => setName(e.currentTarget.value.trim())} data-testid="user-name" />
          </Field>
          <Field id="user-display" label="Display name">
            <Input id="user-display" value={display} placeholder={name || "Alice"} onInput={(e) => setDisplay(e.currentTarget.value)} />
          </Field>
          <RoleBoxes id="new-user-role" roles={roles} onChange={setRoles} />
          {roles.length === 0 && <p class="text-xs font-medium text-destructive-foreground">Give the user one or more roles.</p>}
          <div>
            <Button type="submit" disabled={busy || !name || !!problem || roles.length === 0} data-testid="user-create">
              Add user
            </Button>
          </div>
          <ErrorAlert error={error} what="Adding the user" />
        </form>
      </CardContent>
    </Card>
  );
}

/** UserRow is one user; an admin edits its roles, disables it and resets its password. */
function UserRow({ u, admin, client, onChange, onPassword }: { u: User; admin: boolean; client: Client; onChange: () => void; onPassword: (name: string, pw: string) => void }) {
  const name = u.name ?? "";
  const [roles, setRoles] = useState<string[]>(u.roles ?? []);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => setRoles(u.roles ?? []), [u.resourceVersion]);
  const changed = roles.slice().sort().join(",") !== (u.roles ?? []).slice().sort().join(",");
  const run = async (what: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await what();
      onChange();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const update = (disabled: boolean) =>
    run(() => client.updateUser({ name, body: { displayName: u.displayName, email: u.email, roles, disabled, resourceVersion: u.resourceVersion } }));
  return (
    <TR data-testid={`user-${name}`}>
      <TD label="User">
        <div class="font-medium">{u.displayName || name}</div>
        <div class="font-mono text-xs text-muted-foreground">{u.username}</div>
      </TD>
      <TD label="Roles">{admin ? <RoleBoxes id={`user-${name}-role`} roles={roles} onChange={setRoles} /> : (u.roles ?? []).join(", ") || "—"}</TD>
      <TD label="State">
        <span data-testid={`user-${name}-state`}>{u.disabled ? "Disabled" : u.passwordSet === false ? "No password yet" : "Active"}</span>
      </TD>
      <TD label="Last sign-in">{u.lastSignIn ? new Date(u.lastSignIn).toLocaleString() : "Never"}</TD>
      {admin && (
        <TD label="Actions">
          <div class="flex flex-wrap gap-2">
            {changed && (
              <Button size="sm" disabled={busy || roles.length === 0} onClick={() => void update(!!u.disabled)} data-testid={`user-${name}-save`}>
                Save roles
              </Button>
            )}
            <Button size="sm" variant="outline" disabled={busy} onClick={() => void update(!u.disabled)} data-testid={`user-${name}-toggle`}>
              {u.disabled ? "Enable" : "Disable"}
            </Button>
            <Button
              size="sm"
              variant="outline"
              disabled={busy}
              onClick={() => void run(async () => onPassword(name, (await client.resetPassword({ name, body: {} })).password ?? ""))}
              data-testid={`user-${name}-reset`}
            >
              Reset password
            </Button>
          </div>
          <ErrorAlert error={error} what={`Changing ${name}`} />
        </TD>
      )}
    </TR>
  );
}

/**
 * UsersPage lists Ichor's own users; an admin adds them, edits their roles,
 * disables them and resets their passwords. ichor-ui hashes a password and
 * stores the hash; the browser only ever sees a generated password, once.
 * `ichor user` does the same from a terminal.
 */
export function UsersPage() {
  const { client, me } = useConsole();
  const admin = canAdmin(me?.groups);
  const [users, setUsers] = useState<User[] | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const [shown, setShown] = useState<{ user: string; password: string } | null>(null);
  useEffect(() => {
    client.listUsers().then(
      (r) => {
        setUsers(r.users ?? []);
        setError(null);
      },
      setError,
    );
  }, [client, tick]);
  const reload = () => setTick((t) => t + 1);
  const off = error instanceof ApiError && error.unimplemented;
  return (
    <>
      <h1 class="text-xl font-semibold">Users</h1>
      {off ? (
        <Alert tone="info" title="Ichor's own users are off">
          <span data-testid="users-off">This ichor-ui signs people in through another provider only. Turn Ichor's users on (ichorUI.users.enabled) to manage them here.</span>
        </Alert>
      ) : (
        <ErrorAlert error={error} what="Reading the users" />
      )}
      {shown && <OneTimePassword user={shown.user} password={shown.password} onDone={() => setShown(null)} />}
      {!admin && users && <p class="text-sm text-muted-foreground">Only an Ichor admin adds and changes users.</p>}
      {admin && !off && (
        <CreateUserCard
          client={client}
          onCreated={(user, password) => {
            setShown({ user, password });
            reload();
          }}
        />
      )}
      {users && (
        <Card>
          <CardContent class="pt-4">
            {users.length === 0 ? (
              <p class="text-sm text-muted-foreground">No users yet.</p>
            ) : (
              <Table label="Ichor's users">
                <THead>
                  <tr role="row">
                    <TH>User</TH>
                    <TH>Roles</TH>
                    <TH>State</TH>
                    <TH>Last sign-in</TH>
                    {admin && <TH>Actions</TH>}
                  </tr>
                </THead>
                <TBody>
                  {users.map((u) => (
                    <UserRow key={u.name} u={u} admin={admin} client={client} onChange={reload} onPassword={(user, password) => setShown({ user, password })} />
                  ))}
                </TBody>
              </Table>
            )}
          </CardContent>
        </Card>
      )}
    </>
  );
}
