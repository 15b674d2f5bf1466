import { Button } from "../components/ui/button";
import { useEffect } from "preact/hooks";
import { Card, CardContent, CardDescription, CardHeader } from "../components/ui/card";
import { Alert } from "../components/ui/alert";

/** SignIn is shown only when there is something to say (signed out, the sign-in failed); otherwise the console goes straight to the issuer. */
export function SignIn({ reason, onSignIn }: { reason?: string; onSignIn: () => void }) {
  useEffect(() => {
    document.title = "Sign in · Ichor";
  }, []);
  return (
    <main class="flex min-h-screen items-center justify-center p-4">
      <Card class="w-full max-w-sm">
        <CardHeader>
          <h1 class="text-xl font-semibold">Ichor</h1>
          <CardDescription>Sign in to manage this cluster.</CardDescription>
        </CardHeader>
        <CardContent class="flex flex-col gap-3">
          {reason && <Alert tone="info">{reason}</Alert>}
          <Button onClick={onSignIn} class="w-full" id="sign-in">
            Sign in again
          </Button>
        </CardContent>
      </Card>
    </main>
  );
}
