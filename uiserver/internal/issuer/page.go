package issuer

import (
	"html/template"
	"net/http"
)

var page = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in to Ichor</title>
<style>body{font-family:system-ui,sans-serif;max-width:22rem;margin:4rem auto;padding:0 1rem}
label{display:block;margin-top:1rem}input{width:100%;padding:.4rem;box-sizing:border-box}
button{margin-top:1.5rem;padding:.5rem 1rem}.error{color:#b00020}hr{margin-top:2rem}</style></head>
<body><h1>Sign in to Ichor</h1>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
{{if .Request}}{{if .Provider}}{{if .ProviderDown}}<p class="error" role="status">Sign-in with {{.Provider}} is unavailable: {{.ProviderDown}}</p>
{{else}}<form method="post" action="{{.ExternalAction}}">
<input type="hidden" name="request" value="{{.Request}}">
<button type="submit">Sign in with {{.Provider}}</button>
</form>{{end}}{{if .Password}}<hr>{{end}}{{end}}
{{if .Password}}<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<label for="username">User name</label><input id="username" name="username" autocomplete="username" required value="{{.Username}}" autofocus>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>{{end}}{{end}}
</body></html>
`))

type loginPage struct {
	Action, ExternalAction, Request, Username, Error string
	Password                                         bool
	Provider, ProviderDown                           string
}

// renderLogin shows the login page: the provider's button (or why it is
// unavailable) and the password form, as configured, for the form id
// request; without one it shows only msg.
func (i *Issuer) renderLogin(w http.ResponseWriter, r *http.Request, code int, request, username, msg string) {
	pg := loginPage{Action: LoginPath, ExternalAction: ExternalStartPath, Request: request, Username: username, Error: msg,
		Password: i.opts.Users != nil}
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
