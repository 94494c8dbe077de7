package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/rezuscloud/rezuscloud/backend"
)

// addUsersFlags defines --users-file.
func addUsersFlags(fs *pflag.FlagSet, f *serveFlags) {
	fs.StringVar(&f.usersFile, "users-file", "", "local users `FILE`, one 'NAME ROLE HASH' line per user (bcrypt or argon2id; `rezuscloud user add` makes one); they log in with POST /api/v1/auth/login and the dashboard's form, and the server then needs a credential for every request; SIGHUP reloads it")
}

// openUsers reads the users file, when there is one, and lets its users
// log in. It runs before the server listens: a server with users is
// closed.
func (m *Main) openUsers() error {
	if m.flags.usersFile == "" {
		return nil
	}
	users, err := backend.LoadUsers(m.flags.usersFile)
	if err != nil {
		return fmt.Errorf("--users-file: %w", err)
	}
	m.Server.ServeUsers(users)
	m.log.Info("local users", "file", users.Path(), "users", users.Len())
	return nil
}

// reloadUsers reads the users file again (SIGHUP) and audits what
// changed; on an error the users in use stay.
func (m *Main) reloadUsers() {
	users := m.Server.Users()
	if users == nil {
		return
	}
	changes, err := users.Reload()
	if err != nil {
		m.log.Error("reload users file; keeping the users in use", "err", err)
		return
	}
	m.log.Info("users file reloaded", "users", users.Len())
	for _, c := range changes {
		who := backend.Identity{Name: c.Name, Source: backend.SourceLocal}.Who()
		switch {
		case c.Old == 0:
			m.Server.Audit().Info("user added", append(who, "role", c.New.String())...)
		case c.New == 0:
			m.Server.Audit().Info("user removed", append(who, "role", c.Old.String())...)
		default:
			if c.Old != c.New {
				m.Server.Audit().Info("role change", append(who, "from", c.Old.String(), "to", c.New.String())...)
			}
			if c.Password {
				m.Server.Audit().Info("password change", who...)
			}
		}
	}
}

func newUserCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage local users",
	}
	var role, hash string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Hash a new user's password and print their users-file line",
		Long: `Ask for NAME's password twice, without echoing it, and print the line to add
to the users file (--users-file): the name, the role and the password's hash,
argon2id (the default: 19 MiB, 2 passes) or bcrypt (cost 12). When standard
input is not a terminal, the password is read from it, one line for each
prompt. Send the server SIGHUP to reload the file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := backend.ParseRole(role)
			if err != nil {
				return err
			}
			if err := backend.CheckUserName(args[0]); err != nil {
				return err
			}
			password, err := readNewPassword(cmd.InOrStdin(), cmd.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			h, err := backend.HashPassword(password, hash)
			if err != nil {
				return err
			}
			line, err := backend.UserLine(args[0], r, h)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "# add this line to the users file:\n%s\n", line)
			return err
		},
	}
	add.Flags().StringVar(&role, "role", "view", "role of the user: view, edit or admin")
	add.Flags().StringVar(&hash, "hash", backend.HashArgon2id, "password hash: argon2id or bcrypt")
	cmd.AddCommand(add)
	return cmd
}

// readNewPassword asks for a password twice and returns it when both
// answers match. From a terminal it reads without echo; otherwise it
// reads a line for each prompt.
func readNewPassword(in io.Reader, prompt io.Writer, name string) (string, error) {
	read := lineReader(in)
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		read = func() (string, error) {
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(prompt)
			return string(b), err
		}
	}
	fmt.Fprintf(prompt, "Password for %s: ", name)
	first, err := read()
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	if first == "" {
		return "", errors.New("the password is empty")
	}
	fmt.Fprint(prompt, "Again: ")
	second, err := read()
	if err != nil {
		return "", fmt.Errorf("read the password again: %w", err)
	}
	if first != second {
		return "", errors.New("the passwords differ; nothing was printed")
	}
	return first, nil
}

// lineReader reads one line at a time from in, without its line end.
func lineReader(in io.Reader) func() (string, error) {
	br := bufio.NewReader(in)
	return func() (string, error) {
		line, err := br.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			if err == io.EOF {
				err = errors.New("standard input ended")
			}
			return "", err
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
}
