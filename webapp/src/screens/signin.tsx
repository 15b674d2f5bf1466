import { Button } from "../components/ui/button";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Alert } from "../components/ui/alert";

export function SignIn({ reason, onSignIn }: { reason?: string; onSignIn: () => void }) {
  return (
    <main class="flex min-h-screen items-center justify-center p-4">
      <Card class="w-full max-w-sm">
        <CardHeader>
          <CardTitle>
            <span class="text-xl">Ichor</span>
          </CardTitle>
          <CardDescription>Sign in to manage this cluster.</CardDescription>
        </CardHeader>
        <CardContent class="flex flex-col gap-3">
          {reason && <Alert tone="info">{reason}</Alert>}
          <Button onClick={onSignIn} class="w-full" id="sign-in">
            Sign in
          </Button>
        </CardContent>
      </Card>
    </main>
  );
}
