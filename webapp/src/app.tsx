import { useEffect, useMemo, useState } from "preact/hooks";
import { Session, SignInError, startSignIn } from "./api/auth";
import { createClient, fetchTransport } from "./api/transport";
import { fetchDownloader } from "./lib/download";
import type { Cluster, Machine, WhoAmIResponse } from "./api/generated";
import { ConsoleContext, type Console } from "./context";
import { match, navigate, usePath } from "./lib/router";
import { canWrite } from "./lib/status";
import { sorted } from "./lib/watch";
import { watchMachines } from "./lib/watch";
import { Shell } from "./screens/shell";
import { SignIn } from "./screens/signin";
import { Overview } from "./screens/overview";
import { Nodes } from "./screens/nodes";
import { AddNode } from "./screens/addnode";
import { NodePage } from "./screens/node";
import { OperationPage, Operations } from "./screens/operations";
import { SettingsPage } from "./screens/settings";
import { UsersPage } from "./screens/users";
import { BackupsPage } from "./screens/backups";
import { ConfigurationPage } from "./screens/configuration";
import { CiliumPage } from "./screens/cilium";
import { Alert } from "./components/ui/alert";
import { connectionOf, pollMs, staleAfterMs } from "./lib/connection";
import { describe } from "./api/errors";

type Phase = { kind: "starting" } | { kind: "signedOut"; reason?: string } | { kind: "ready" };

export function App() {
  const session = useMemo(() => new Session(), []);
  const [phase, setPhase] = useState<Phase>({ kind: "starting" });
  const path = usePath();
  const route = match(path);

  useEffect(() => {
    session.onSignedOut = (reason) => setPhase({ kind: "signedOut", reason });
    (async () => {
      try {
        if (match(location.pathname).screen === "callback") {
          const to = await session.completeSignIn(new URLSearchParams(location.search));
          navigate(to, true);
          setPhase({ kind: "ready" });
          return;
        }
        if (Session.hasRefresh()) {
          await session.renew();
          setPhase({ kind: "ready" });
          return;
        }
        setPhase({ kind: "signedOut" });
      } catch (e) {
        if (match(location.pathname).screen === "callback") navigate("/", true);
        setPhase({ kind: "signedOut", reason: e instanceof SignInError ? e.message : String(e) });
      }
    })();
  }, [session]);

  if (phase.kind === "starting") {
    return (
      <p class="p-6 text-sm text-muted-foreground" role="status">
        Connecting…
      </p>
    );
  }
  if (phase.kind === "signedOut") {
    const signIn = () => startSignIn(route.screen === "callback" ? "/" : location.pathname + location.search);
    // Nothing to tell: straight to the issuer's form, no page with one button.
    if (!phase.reason) return <Redirect go={signIn} />;
    return <SignIn reason={phase.reason} onSignIn={signIn} />;
  }
  return (
    <Signed
      session={session}
      route={route}
      onSignOut={async () => {
        await session.signOut();
        navigate("/", true);
        setPhase({ kind: "signedOut", reason: "You signed out." });
      }}
    />
  );
}

/** Redirect starts the sign-in at once and says so while the browser leaves. */
function Redirect({ go }: { go: () => Promise<void> }) {
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    go().catch(setError);
  }, []);
  if (error) return <SignIn reason={`The sign-in could not start: ${describe(error)}`} onSignIn={() => go().catch(setError)} />;
  return (
    <p class="p-6 text-sm text-muted-foreground" role="status">
      Signing in…
    </p>
  );
}

function Signed({ session, route, onSignOut }: { session: Session; route: ReturnType<typeof match>; onSignOut: () => void }) {
  const client = useMemo(() => createClient(fetchTransport(session)), [session]);
  const download = useMemo(() => fetchDownloader(session), [session]);
  const [me, setMe] = useState<WhoAmIResponse | null>(null);
  const [cluster, setCluster] = useState<Cluster | null>(null);
  const [clusterError, setClusterError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const [machines, setMachines] = useState<Machine[]>([]);
  const [synced, setSynced] = useState(false);
  const [live, setLive] = useState(false);
  const [watchError, setWatchError] = useState<unknown>(null);
  // The heartbeat: when ichor-ui last answered (a cluster read or a machine event).
  const [lastBeat, setLastBeat] = useState(0);
  const [, setWake] = useState(0);

  useEffect(() => {
    client.whoAmI().then(setMe, () => setMe(null));
  }, [client]);

  useEffect(() => {
    let stop = false;
    const load = () =>
      client.getCluster().then(
        (r) => {
          if (!stop) {
            setCluster(r.cluster ?? null);
            setClusterError(null);
            setLastBeat(Date.now());
          }
        },
        (e) => !stop && setClusterError(e),
      );
    load();
    const t = setInterval(load, pollMs);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [client, tick]);

  useEffect(() => {
    const ac = new AbortController();
    watchMachines(client, ac.signal, (set, isLive, err) => {
      setMachines(sorted(set));
      setSynced(set.synced);
      setLive(isLive);
      setWatchError(err ?? null);
      if (isLive) setLastBeat(Date.now());
    });
    return () => ac.abort();
  }, [client]);

  // Render again when the heartbeat goes stale, so that the dot and the
  // "data as of" say so without any other event.
  useEffect(() => {
    if (!lastBeat) return;
    const t = setTimeout(() => setWake((n) => n + 1), lastBeat + staleAfterMs + 50 - Date.now());
    return () => clearTimeout(t);
  }, [lastBeat]);
  const connection = connectionOf({ now: Date.now(), lastBeat, watchLive: live, error: clusterError ? describe(clusterError) : undefined });

  const value: Console = {
    client,
    me,
    cluster,
    clusterError,
    refreshCluster: () => setTick((t) => t + 1),
    machines,
    synced,
    live,
    watchError,
    connection,
    canWrite: canWrite(me?.groups),
    download,
  };

  let screen;
  switch (route.screen) {
    case "overview":
    case "callback":
      screen = <Overview />;
      break;
    case "nodes":
      screen = <Nodes />;
      break;
    case "add":
      screen = <AddNode />;
      break;
    case "node":
      screen = <NodePage name={route.name} tab={route.tab} />;
      break;
    case "operations":
      screen = <Operations />;
      break;
    case "operation":
      screen = <OperationPage name={route.name} />;
      break;
    case "settings":
      screen = <SettingsPage />;
      break;
    case "users":
      screen = <UsersPage />;
      break;
    case "backups":
      screen = <BackupsPage />;
      break;
    case "configuration":
      screen = <ConfigurationPage edit={route.edit} />;
      break;
    case "cilium":
      screen = <CiliumPage />;
      break;
    default:
      screen = (
        <Alert tone="warn" title="No such page">
          Nothing lives at {route.path}. <a href="/" class="underline">Go to the overview</a>.
        </Alert>
      );
  }
  return (
    <ConsoleContext.Provider value={value}>
      <Shell route={route} onSignOut={onSignOut}>
        {screen}
      </Shell>
    </ConsoleContext.Provider>
  );
}
