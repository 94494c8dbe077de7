package webhook

import "testing"

func TestNormalizeRepoURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://github.com/acme/infra.git", "github.com/acme/infra"},
		{"https://GitHub.COM/acme/infra", "github.com/acme/infra"},
		{"https://github.com/acme/infra/", "github.com/acme/infra"},
		{"https://github.com/acme/infra.git/", "github.com/acme/infra"},
		{"http://github.com:80/acme/infra", "github.com/acme/infra"},
		{"https://github.com:443/acme/infra", "github.com/acme/infra"},
		{"https://user:token@github.com/acme/infra.git", "github.com/acme/infra"},
		{"https://github.com/acme/infra?x=1#frag", "github.com/acme/infra"},
		{"git@github.com:acme/infra.git", "github.com/acme/infra"},
		{"github.com:acme/infra", "github.com/acme/infra"},
		{"ssh://git@github.com/acme/infra.git", "github.com/acme/infra"},
		{"ssh://git@github.com:22/acme/infra", "github.com/acme/infra"},
		{"SSH://git@GitHub.com/acme/infra", "github.com/acme/infra"},
		{"git+ssh://git@github.com/acme/infra", "github.com/acme/infra"},
		{"git://github.com/acme/infra.git", "github.com/acme/infra"},
		{"https://github.com./acme/infra", "github.com/acme/infra"},
		{"  https://github.com/acme/infra\n", "github.com/acme/infra"},
		{"https://github.com//acme//infra", "github.com/acme/infra"},
		{"https://github.com/Acme/Infra", "github.com/Acme/Infra"},
		{"https://gitlab.example.com/group/sub/project.git", "gitlab.example.com/group/sub/project"},
		{"http://forge.example.com:3000/acme/infra.git", "forge.example.com:3000/acme/infra"},
		{"ssh://git@forge.example.com:2222/acme/infra.git", "forge.example.com:2222/acme/infra"},
		{"git://127.0.0.1:9418/infra.git", "127.0.0.1/infra"},
		{"git://127.0.0.1:40123/infra.git", "127.0.0.1:40123/infra"},
		{"http://[::1]:8080/infra", "[::1]:8080/infra"},
		{"http://[::1]/infra", "[::1]/infra"},
		{"git@gitlab.example.com:/srv/infra.git", "gitlab.example.com/srv/infra"},
		{"https://github.com/acme/my%20infra", "github.com/acme/my infra"},
		{"https://github.com/acme/bad%zzescape", "github.com/acme/bad%zzescape"},
		{"https://github.com", "github.com"},
		{"/srv/git/infra.git/", "/srv/git/infra"},
		{"file:///srv/git/infra.git", "/srv/git/infra"},
		{"./infra", "infra"},
		{"", ""},
		{"   ", ""},
		{".git", ""},
	} {
		if got := NormalizeRepoURL(tc.in); got != tc.want {
			t.Errorf("NormalizeRepoURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The URLs a forge puts in one payload name one repository.
func TestNormalizeRepoURLPayloadForms(t *testing.T) {
	for _, forms := range [][]string{
		{"https://github.com/acme/infra.git", "https://github.com/acme/infra", "git@github.com:acme/infra.git", "ssh://git@github.com/acme/infra"},
		{"https://gitlab.example.com/platform/infra.git", "git@gitlab.example.com:platform/infra.git", "https://gitlab.example.com/platform/infra"},
	} {
		want := NormalizeRepoURL(forms[0])
		for _, f := range forms[1:] {
			if got := NormalizeRepoURL(f); got != want {
				t.Errorf("NormalizeRepoURL(%q) = %q, want %q as for %q", f, got, want, forms[0])
			}
		}
	}
	if NormalizeRepoURL("https://github.com/acme/infra") == NormalizeRepoURL("https://github.com/acme/infra2") ||
		NormalizeRepoURL("https://github.com/acme/infra") == NormalizeRepoURL("https://gitlab.com/acme/infra") {
		t.Error("different repositories compare equal")
	}
}
