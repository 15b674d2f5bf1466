package issuer

import (
	"html/template"
	"net/http"
)

// page is the login form, in the console's look: its colours (the tokens of
// webapp/src/index.css, light and dark), its card, its brand mark and its
// primary button. The CSP allows inline styles only, no script: the theme
// follows prefers-color-scheme. After a failed sign-in for a user name,
// focus goes to the password (the name is kept), which is marked invalid and
// described by the error.
var page = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Sign in · Ichor</title>
<style>
:root{--background:oklch(1 0 0);--foreground:oklch(0.145 0 0);--card:oklch(1 0 0);--muted-foreground:oklch(0.47 0.015 286);
--border:oklch(0.9 0.004 286);--primary:oklch(0.46 0.15 262);--primary-foreground:oklch(0.985 0 0);--destructive:oklch(0.5 0.2 27);
--destructive-foreground:oklch(0.45 0.18 27);--ring:oklch(0.55 0.17 262)}
@media (prefers-color-scheme: dark){:root{--background:oklch(0.16 0.005 286);--foreground:oklch(0.97 0 0);--card:oklch(0.21 0.006 286);
--muted-foreground:oklch(0.74 0.015 286);--border:oklch(0.34 0.006 286);--primary:oklch(0.76 0.11 262);--primary-foreground:oklch(0.16 0.02 262);
--destructive:oklch(0.68 0.19 25);--destructive-foreground:oklch(0.8 0.12 25);--ring:oklch(0.72 0.13 262)}}
*{box-sizing:border-box}
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;padding:1rem;background:var(--background);
color:var(--foreground);font-family:ui-sans-serif,system-ui,sans-serif;line-height:1.5;-webkit-font-smoothing:antialiased}
main{width:100%;max-width:24rem}
.card{border:1px solid var(--border);border-radius:.5rem;background:var(--card);box-shadow:0 1px 2px rgb(0 0 0/.06);padding:1.5rem}
.brand{display:flex;align-items:center;gap:.5rem;font-weight:600}
.mark{display:inline-block;width:1.25rem;height:1.25rem;border-radius:.25rem;background:var(--primary)}
h1{font-size:1.25rem;line-height:1.75rem;font-weight:600;margin:1rem 0 .25rem}
.lead{margin:0;color:var(--muted-foreground);font-size:.875rem}
label{display:block;font-size:.875rem;font-weight:500;margin:1rem 0 .375rem}
input{display:block;width:100%;height:2.25rem;padding:.25rem .75rem;border:1px solid var(--border);border-radius:.375rem;
background:var(--background);color:inherit;font:inherit;font-size:.875rem}
input[aria-invalid=true]{border-color:var(--destructive)}
:focus-visible{outline:2px solid var(--ring);outline-offset:2px}
button{display:inline-flex;align-items:center;justify-content:center;width:100%;height:2.25rem;margin-top:1.5rem;padding:0 1rem;
border:0;border-radius:.375rem;background:var(--primary);color:var(--primary-foreground);font:inherit;font-size:.875rem;font-weight:500;cursor:pointer}
button:hover{opacity:.9}
.error{margin:1rem 0 0;padding:.75rem;border:1px solid color-mix(in oklab,var(--destructive) 50%,transparent);border-radius:.375rem;
background:color-mix(in oklab,var(--destructive) 10%,transparent);color:var(--destructive-foreground);font-size:.875rem}
hr{margin:1.5rem 0 0;border:0;border-top:1px solid var(--border)}
</style></head>
<body><main><div class="card">
<div class="brand"><span class="mark" aria-hidden="true"></span><span>Ichor</span></div>
<h1>Sign in to Ichor</h1><p class="lead">Sign in to manage this cluster.</p>
{{if .Error}}<p class="error" id="login-error" role="alert">{{.Error}}</p>{{end}}
{{if .Code}}<label for="sign-in-code">Your sign-in code: copy it into the terminal that asks for it, within a minute</label>
<input id="sign-in-code" readonly value="{{.Code}}">{{end}}
{{if .Request}}{{if .Provider}}{{if .ProviderDown}}<p class="error" role="status">Sign-in with {{.Provider}} is unavailable: {{.ProviderDown}}</p>
{{else}}<form method="post" action="{{.ExternalAction}}">
<input type="hidden" name="request" value="{{.Request}}">
<button type="submit">Sign in with {{.Provider}}</button>
</form>{{end}}{{if .Password}}<hr>{{end}}{{end}}
{{if .Password}}<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<label for="username">User name</label><input id="username" name="username" autocomplete="username" required value="{{.Username}}"{{if not .RetryPassword}} autofocus{{end}}>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required{{if .RetryPassword}} autofocus aria-invalid="true" aria-describedby="login-error"{{end}}>
<button type="submit">Sign in</button>
</form>{{end}}{{end}}
</div></main></body></html>
`))

type loginPage struct {
	Action, ExternalAction, Request, Username, Error string
	Password                                         bool
	// RetryPassword: a sign-in of Username failed; the password is asked again.
	RetryPassword          bool
	Provider, ProviderDown string
	// Code is a sign-in's code for `ichor auth token --headless` (CodePage).
	Code string
}

// renderLogin shows the login page: the provider's button (or why it is
// unavailable) and the password form, as configured, for the form id
// request; without one it shows only msg.
func (i *Issuer) renderLogin(w http.ResponseWriter, r *http.Request, code int, request, username, msg string) {
	pg := loginPage{Action: LoginPath, ExternalAction: ExternalStartPath, Request: request, Username: username, Error: msg,
		Password: i.opts.Users != nil, RetryPassword: msg != "" && username != ""}
	if request != "" && i.opts.External != nil {
		pg.Provider = i.opts.External.Name()
		if err := i.opts.External.Ready(r.Context()); err != nil {
			pg.ProviderDown = err.Error()
		}
	}
	writePage(w, code, pg)
}

func writePage(w http.ResponseWriter, code int, pg loginPage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.WriteHeader(code)
	_ = page.Execute(w, pg)
}

// pageError shows an error without a form: the request cannot go on.
func pageError(w http.ResponseWriter, msg string) {
	writePage(w, http.StatusBadRequest, loginPage{Error: msg})
}

// codePage shows the code of a sign-in whose redirect URI is the issuer's
// own CodePath (`ichor auth token --headless`, a terminal without a browser
// on this device): the person copies it into the terminal, which exchanges
// it with its PKCE verifier, so the code alone is worth nothing.
func (i *Issuer) codePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		pageError(w, "the sign-in failed: "+e+" "+q.Get("error_description")+"; start it again in the terminal")
		return
	}
	if q.Get("code") == "" {
		pageError(w, "there is no sign-in code here: start the sign-in in the terminal with `ichor auth token --headless`")
		return
	}
	writePage(w, http.StatusOK, loginPage{Code: q.Get("code")})
}
