package nodes

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// TalosconfigPath is the console's reader talosconfig download:
//
//	GET /api/v1/cluster/talosconfig?duration=1h
//
// an os:reader talosconfig of the served cluster for the signed-in user,
// one hour unless asked (twelve at most), as `ichor cluster talosconfig`
// writes it: `download` on talosclusters/talosconfig-reader checked as the
// user, the TalosCredentialRequest created as the user (the webhook checks
// again and names them; the controller, signing it, records the Warning
// Event naming them on the TalosCluster). Unlike the node downloads, the credential is the
// download: the key pair is made here and its private half goes to the
// browser in the file, never into a log or an object.
const TalosconfigPath = "/api/v1/cluster/talosconfig"

func (d *Downloads) serveTalosconfig(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()

	id, ok := identity.From(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "sign in first: the request carries no signed-in user")
	}

	var asked time.Duration

	if v := r.URL.Query().Get("duration"); v != "" {
		var err error
		if asked, err = time.ParseDuration(v); err != nil {
			return status.Errorf(codes.InvalidArgument, "duration %q is not a duration (1h, 90m); nothing was requested", v)
		}
	}

	dur, err := download.ValidTalosconfigDuration(asked)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v; nothing was requested", err)
	}

	s := d.Nodes
	what := "downloading a reader talosconfig of cluster " + s.ClusterName

	if err := s.Clients.AuthorizeSubresource(ctx, guard.VerbDownload, guard.ResourceTalosClusters, guard.SubresourceTalosconfigReader); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v (ichor-operator and ichor-admin grant download on talosclusters/%s)",
			what, err, guard.SubresourceTalosconfigReader)
	}

	if _, err := s.cluster(ctx); err != nil {
		return err
	}

	machines := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, machines, client.InNamespace(s.Clients.Namespace)); err != nil {
		return userError(ctx, err, "listing the machines")
	}

	endpoints := download.TalosconfigEndpoints(machines.Items, s.ClusterName, s.Port)
	if len(endpoints) == 0 {
		return status.Errorf(codes.FailedPrecondition,
			"%s: the cluster has no running control plane with an address for the talosconfig's endpoints", what)
	}

	key, err := download.NewTalosconfigKey()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}

	tcr := download.TalosconfigRequest(s.Clients.Namespace, s.ClusterName, s.ClusterName+"-talosconfig-", key, dur)
	tcr.Labels = map[string]string{LabelManagedBy: managedBy}

	if err := s.Clients.User.Create(ctx, tcr); err != nil {
		if apierrors.IsForbidden(err) {
			return status.Errorf(codes.PermissionDenied, "%s: the TalosCredentialRequest was refused: %s", what, apiMessage(err))
		}

		return status.Errorf(codes.Unavailable, "%s: creating the TalosCredentialRequest: %s", what, apiMessage(err))
	}

	timeout := d.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}

	wctx, cancel := context.WithTimeout(ctx, timeout)
	signed, err := wait(wctx, d.Backend, s.Clients.Namespace, tcr.Name, id.Username+"'s talosconfig-reader")

	cancel()

	if err != nil {
		return err
	}

	data, err := key.Talosconfig(s.ClusterName, endpoints, signed)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}

	expires := time.Now().Add(dur)
	if signed.Status.ExpiresAt != nil {
		expires = signed.Status.ExpiresAt.Time
	}

	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", s.ClusterName+"-talosconfig"))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Ichor-Expires-At", expires.UTC().Format(time.RFC3339))
	_, _ = w.Write(data) // a client gone mid-write has nothing left to tell

	return nil
}
