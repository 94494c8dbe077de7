package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSH serves the bare repositories under a temporary directory over SSH.
// The SSH layer is golang.org/x/crypto/ssh, since no sshd runs here; the
// git side is the real `git-upload-pack` and `git-receive-pack`. It accepts
// exactly one client key, which it generates, and nothing but those two
// commands.
type SSH struct {
	repos
	l          *listener
	hostKey    ssh.Signer
	clientPEM  []byte
	clientPub  ssh.PublicKey
	config     *ssh.ServerConfig
	knownHosts string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewSSH starts an SSH git server for the rest of the test.
func NewSSH(t testing.TB) *SSH {
	t.Helper()
	s := &SSH{repos: repos{t: t, root: t.TempDir()}, conns: map[net.Conn]struct{}{}}
	var err error
	if s.hostKey, err = newSigner(); err != nil {
		t.Fatalf("host key: %v", err)
	}
	_, client, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("client key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(client, "gittest client")
	if err != nil {
		t.Fatalf("client key: %v", err)
	}
	s.clientPEM = pem.EncodeToMemory(block)
	signer, err := ssh.NewSignerFromKey(client)
	if err != nil {
		t.Fatalf("client key: %v", err)
	}
	s.clientPub = signer.PublicKey()
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(s.clientPub.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown public key")
		},
	}
	s.config.AddHostKey(s.hostKey)
	s.l = newListener(t, s.serve)
	s.knownHosts = filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.l.addr)}, s.hostKey.PublicKey()) + "\n"
	if err := os.WriteFile(s.knownHosts, []byte(line), 0o600); err != nil {
		t.Fatalf("known_hosts: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func newSigner() (ssh.Signer, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(key)
}

// URL returns the ssh:// URL of the repository name, with user git.
func (s *SSH) URL(name string) string {
	return "ssh://git@" + s.l.addr + "/" + name
}

// ClientKey returns the PEM private key the server accepts.
func (s *SSH) ClientKey() []byte { return s.clientPEM }

// KnownHostsFile returns a known_hosts file that holds the server's host key
// for its address.
func (s *SSH) KnownHostsFile() string { return s.knownHosts }

// Connections returns how many connections the server has accepted.
func (s *SSH) Connections() int { return int(s.l.conns.Load()) }

// Stop makes the server unreachable until Start.
func (s *SSH) Stop() {
	if !s.l.stop() {
		return
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Start listens again on the same address after Stop.
func (s *SSH) Start() {
	s.t.Helper()
	s.l.start()
}

func (s *SSH) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

func (s *SSH) handle(conn net.Conn) {
	defer conn.Close()
	sc, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, requests)
	}
}

// session runs the one git command a client asks for.
func (s *SSH) session(ch ssh.Channel, requests <-chan *ssh.Request) {
	defer ch.Close()
	for req := range requests {
		switch req.Type {
		case "env":
			req.Reply(true, nil)
		case "exec":
			var payload struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
				req.Reply(false, nil)
				return
			}
			cmd, err := s.command(payload.Command)
			if err != nil {
				req.Reply(true, nil)
				fmt.Fprintf(ch.Stderr(), "gittest: %v\n", err)
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{1}))
				return
			}
			req.Reply(true, nil)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
			status := uint32(0)
			if err := cmd.Run(); err != nil {
				status = 1
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					status = uint32(exit.ExitCode())
				}
			}
			ch.CloseWrite()
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
			return
		default:
			req.Reply(false, nil)
		}
	}
}

// command parses "git-upload-pack '/repo.git'" into a command on a
// repository under the root.
func (s *SSH) command(line string) (*exec.Cmd, error) {
	name, arg, ok := strings.Cut(line, " ")
	if !ok || (name != "git-upload-pack" && name != "git-receive-pack") {
		return nil, fmt.Errorf("command %q is not allowed", line)
	}
	if len(arg) < 2 || arg[0] != '\'' || arg[len(arg)-1] != '\'' || strings.Contains(arg[1:len(arg)-1], "'") {
		return nil, fmt.Errorf("repository argument %q is not a simple quoted path", arg)
	}
	rel := path.Clean("/" + arg[1:len(arg)-1])
	cmd := exec.Command("git", strings.TrimPrefix(name, "git-"), filepath.Join(s.root, filepath.FromSlash(rel)))
	cmd.Env = gitEnv()
	return cmd, nil
}
