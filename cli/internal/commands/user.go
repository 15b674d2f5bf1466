package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
)

// userCommand manages Ichor's own users of the web console (IchorUser CRs
// and their password hashes). Writing a password needs write access to the
// Secret ichor-user-credentials: a cluster administrator's kubeconfig.
func userCommand() *cli.Command {
	return &cli.Command{
		Name:   "user",
		Usage:  "manage Ichor's own users of the web console (ichorUI.users.enabled)",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a user with a generated password, shown once",
				ArgsUsage: argUser,
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: flagRole, Usage: "`ROLE`: viewer, operator or admin (repeatable; required)"},
					&cli.StringFlag{Name: "display-name", Usage: "the `NAME` the console shows (default: NAME)"},
					&cli.StringFlag{Name: "email", Usage: "e-mail `ADDRESS`"},
				},
				Action: userCreate,
			},
			{
				Name:      "set-password",
				Usage:     "set a user's password: generated and shown once, or read from a file (- for standard input)",
				ArgsUsage: argUser,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "password-file", Usage: "read the password from `FILE` (- for standard input); at least 12 characters", TakesFile: true},
				},
				Action: userSetPassword,
			},
			{
				Name:      "update",
				Usage:     "change a user's roles, display name or e-mail, or disable (ending their sessions) and enable them again",
				ArgsUsage: argUser,
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: flagRole, Usage: "`ROLE`: viewer, operator or admin (repeatable; replaces the roles)"},
					&cli.StringFlag{Name: "display-name", Usage: "the `NAME` the console shows"},
					&cli.StringFlag{Name: "email", Usage: "e-mail `ADDRESS`"},
					&cli.BoolFlag{Name: "disable", Usage: "stop the user from signing in; their sessions end"},
					&cli.BoolFlag{Name: "enable", Usage: "let a disabled user sign in again"},
				},
				Action: userUpdate,
			},
			{
				Name:   "list",
				Usage:  "list the users",
				Action: userList,
			},
		},
	}
}

// argUser is the positional argument of the user commands.
const argUser = "NAME"

// userPassword is what `user create` and `user set-password` print with -o json|yaml.
type userPassword struct {
	Name     string `json:"name"`
	Username string `json:"username"`
	Password string `json:"password"`
}

func userCreate(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one user NAME"); err != nil {
		return err
	}
	name := cmd.Args().First()
	if err := userpass.ValidateName(name); err != nil {
		return err
	}
	roles := cmd.StringSlice(flagRole)
	if len(roles) == 0 {
		return fmt.Errorf("--role is required: give one or more of %s", strings.Join(userpass.Roles, ", "))
	}
	if err := userpass.CheckRoles(roles); err != nil {
		return fmt.Errorf("--%w", err) // "--role \"x\" is not a role: ..."
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	display := cmd.String("display-name")
	if display == "" {
		display = name
	}
	spec := ichorv1alpha1.IchorUserSpec{DisplayName: display, Email: cmd.String("email"), Roles: roles}
	pw, err := userpass.Create(ctx, r.c(), r.ns(), spec, name)
	if errors.Is(err, userpass.ErrUserExists) {
		return fmt.Errorf("user %s exists already in namespace %s; nothing was changed (a new password: `ichor user set-password %s`)", name, r.ns(), name)
	}
	if err != nil {
		return r.conn.Explain(err, "creating user "+name)
	}
	return r.printPassword(name, pw, "created")
}

func userSetPassword(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one user NAME"); err != nil {
		return err
	}
	name := cmd.Args().First()
	if err := userpass.ValidateName(name); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	pw, given, err := r.readPassword(cmd.String("password-file"))
	if err != nil {
		return err
	}
	if err := userpass.Set(ctx, r.c(), r.ns(), name, pw); err != nil {
		return r.conn.Explain(err, "setting the password of user "+name)
	}
	if given {
		r.printf("The password of user %s is set.\n", name)
		return nil
	}
	return r.printPassword(name, pw, "has a new password")
}

// readPassword reads the password from file ("-" is standard input), or
// generates one when file is empty (given is then false).
func (r *run) readPassword(file string) (pw string, given bool, err error) {
	var b []byte
	switch file {
	case "":
		pw, err = userpass.Generate()
		return pw, false, err
	case "-":
		b, err = io.ReadAll(io.LimitReader(r.in, 4096))
	default:
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", false, fmt.Errorf("--password-file: %w", err)
	}
	pw = strings.TrimRight(string(b), "\r\n")
	if len(pw) < userpass.MinLength {
		return "", false, fmt.Errorf("--password-file: the password is shorter than %d characters; nothing was changed", userpass.MinLength)
	}
	return pw, true, nil
}

func (r *run) printPassword(name, pw, what string) error {
	if r.format != output.Table {
		return output.Object(r.out, r.format, userPassword{Name: name, Username: "ichor:" + name, Password: pw})
	}
	r.printf("User %s %s. Its password, shown only now:\n\n  %s\n\nSign in to the web console as %q with it.\n", name, what, pw, name)
	return nil
}

func userList(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	list := &ichorv1alpha1.IchorUserList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing IchorUsers in namespace "+r.ns())
	}
	if r.format != output.Table {
		for i := range list.Items {
			list.Items[i].ManagedFields = nil
		}
		list.TypeMeta = metav1.TypeMeta{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "IchorUserList"}
		return output.Object(r.out, r.format, list)
	}
	if len(list.Items) == 0 {
		r.printf("No users in namespace %s: `ichor user create NAME --role admin` creates one.\n", r.ns())
		return nil
	}
	t := &output.Rows{Header: []string{colName, "DISPLAY NAME", "ROLES", "DISABLED", "LAST SIGN-IN", colAge}}
	now := time.Now()
	for i := range list.Items {
		u := &list.Items[i]
		last := ""
		if u.Status.LastSignIn != nil {
			last = output.Age(u.Status.LastSignIn.Time, now) + " ago"
		}
		t.Add(u.Name, u.Spec.DisplayName, strings.Join(u.Spec.Roles, ","), fmt.Sprint(u.Spec.Disabled), last, output.Age(u.CreationTimestamp.Time, now))
	}
	return t.Write(r.out)
}

// userUpdate changes an IchorUser as the kubeconfig's user (ichor-admin may);
// the flags are checked before anything is read or written.
func userUpdate(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one user NAME"); err != nil {
		return err
	}
	name := cmd.Args().First()
	if err := userpass.ValidateName(name); err != nil {
		return err
	}
	roles := cmd.StringSlice(flagRole)
	if len(roles) > 0 {
		if err := userpass.CheckRoles(roles); err != nil {
			return fmt.Errorf("--%w; nothing was changed", err)
		}
	}
	switch {
	case cmd.Bool("disable") && cmd.Bool("enable"):
		return errors.New("--disable and --enable together: give one; nothing was changed")
	case len(roles) == 0 && !cmd.IsSet("display-name") && !cmd.IsSet("email") && !cmd.Bool("disable") && !cmd.Bool("enable"):
		return fmt.Errorf("nothing to change: give --role, --display-name, --email, --disable or --enable; run `%s --help`", cmd.FullName())
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	u := &ichorv1alpha1.IchorUser{}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, u); err != nil {
			return err
		}
		if len(roles) > 0 {
			u.Spec.Roles = roles
		}
		if cmd.IsSet("display-name") {
			u.Spec.DisplayName = cmd.String("display-name")
		}
		if cmd.IsSet("email") {
			u.Spec.Email = cmd.String("email")
		}
		if cmd.Bool("disable") || cmd.Bool("enable") {
			u.Spec.Disabled = cmd.Bool("disable")
		}
		return r.c().Update(ctx, u)
	})
	if err != nil {
		return fmt.Errorf("%w; nothing was changed", r.conn.Explain(err, "updating user "+name))
	}
	state := "enabled"
	if u.Spec.Disabled {
		state = "disabled (their sessions end within seconds)"
	}
	r.printf("user %s (ichor:%s): roles %s, %s\n", name, name, strings.Join(u.Spec.Roles, ", "), state)
	return nil
}
