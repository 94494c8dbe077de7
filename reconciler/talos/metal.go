package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The bare-metal part of the plane. A metal machine exists before tofu
// records it: it boots the Talos ISO and waits in maintenance mode, where
// it serves the Talos API with a self-signed certificate and takes only
// ApplyConfiguration. The plane gives it its config there (ApplyMaintenance,
// over a Pool's Maintenance client), after which it installs Talos and is a machine
// like any other, reached with the tenant's credentials. A machine its node
// group no longer uses is reset (ResetRemoved), a control plane only once
// it has left etcd.
//
// These functions take machinery clients and hold no state of their own,
// so that they serve as steps of the plane.

// ErrNotInMaintenance is returned, wrapped, by ApplyMaintenance when the
// machine answers but not as a maintenance server: it has a config
// already (the tenant's credentials reach it), or it is another tenant's.
var ErrNotInMaintenance = errors.New("machine is not in maintenance mode")

// ApplyMaintenance gives a machine in maintenance mode its config, through
// c from Pool.Maintenance, in mode auto (it installs and reboots).
func ApplyMaintenance(ctx context.Context, c *client.Client, config []byte) error {
	_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: config, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err == nil {
		return nil
	}
	if s, _ := status.FromError(err); s.Code() == codes.Unavailable && isHandshake(s.Message()) {
		return fmt.Errorf("%w: %s", ErrNotInMaintenance, handshakeReason(s.Message()))
	}
	return fmt.Errorf("apply config in maintenance mode: %w", err)
}

func isHandshake(msg string) bool {
	return strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "certificate")
}

// InEtcd reports whether hostname is a member of the etcd cluster that
// peer, a client of one of the cluster's control planes, sees.
func InEtcd(ctx context.Context, peer *client.Client, hostname string) (bool, error) {
	resp, err := peer.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		return false, fmt.Errorf("etcd members: %w", err)
	}
	for _, msg := range resp.GetMessages() {
		for _, m := range msg.GetMembers() {
			if m.GetHostname() == hostname {
				return true, nil
			}
		}
	}
	return false, nil
}

// ErrStillInEtcd is returned, wrapped, by ResetRemoved when a control
// plane is still an etcd member after it was asked to leave.
var ErrStillInEtcd = errors.New("machine is still an etcd member")

// ResetRemoved resets a machine its node group no longer uses through c, a
// client of the machine with the tenant's credentials; it comes back in
// maintenance mode, ready for another use. A control plane first leaves
// etcd and is reset, gracefully, only once peer, a client of a control
// plane that stays, no longer lists its host name (hostname, or the one
// the machine reports when that is "") as a member.
//
// With no peer the last control plane goes, and with it the cluster:
// there is no etcd left to leave, and a graceful reset, which would try
// to, cannot finish on an etcd of one member. It is reset without the
// leave and the drain (Graceful false), as Talos's own guide does for the
// last member. Workers are always reset gracefully (cordoned and drained).
func ResetRemoved(ctx context.Context, c, peer *client.Client, hostname string, controlPlane bool) error {
	if controlPlane && peer != nil {
		if hostname == "" {
			v, err := c.Version(ctx)
			if err != nil {
				return fmt.Errorf("host name: %w", err)
			}
			for _, m := range v.GetMessages() {
				hostname = m.GetMetadata().GetHostname()
			}
			if hostname == "" {
				return errors.New("host name: the machine reports none, so its etcd membership cannot be checked")
			}
		}
		member, err := InEtcd(ctx, peer, hostname)
		if err != nil {
			return err
		}
		if member {
			if err := c.EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
				return fmt.Errorf("leave etcd: %w", err)
			}
			if member, err = waitLeft(ctx, peer, hostname); err != nil {
				return err
			}
			if member {
				return fmt.Errorf("%s: %w", hostname, ErrStillInEtcd)
			}
		}
	}
	err := c.ResetGeneric(ctx, &machine.ResetRequest{Graceful: !controlPlane || peer != nil, Reboot: true})
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// waitLeft asks peer until hostname is gone from etcd, for a few seconds.
func waitLeft(ctx context.Context, peer *client.Client, hostname string) (bool, error) {
	for range 20 {
		member, err := InEtcd(ctx, peer, hostname)
		if err != nil || !member {
			return member, err
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return true, nil
}
