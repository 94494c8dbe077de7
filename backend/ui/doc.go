// Package ui is the dashboard: read-only web pages about the tenants, their
// node groups and machines, and the commits, served by `rezuscloud serve`
// at "/" and rendered on the server with html/template.
//
// Every page reads the store through the backend's typed transactions,
// the same objects the REST API serves, and is whole without JavaScript.
// One small script (assets/app.js) makes pages live: it follows the API's
// watch streams (Server-Sent Events) and, when an object of a kind that a
// region of the page shows changes, fetches that region again from the
// server (the page's URL with ?part=NAME), a few times a second at most.
// Assets are embedded and served under content-hashed names with
// immutable cache headers; no page loads anything from another host, and
// every answer carries a strict Content-Security-Policy (no inline
// scripts or styles).
//
// Access follows the API: without a tokens file everyone is admin (the
// server listens on loopback only); with one, the login page takes a token
// and starts a backend.Sessions session, whose cookie also authenticates
// the page's reads of the API, the machine logs included. The login and
// logout forms carry CSRF tokens. View sessions see no download links (the
// downloads themselves answer them 403) and are told that logs need the
// edit role.
//
// Pictures are drawn on the server as inline SVG (chart.go) from package
// history: a machine's gauges as sparklines, a tenant's machines as bands
// coloured by stage with its rollouts, reboots and restores, and each
// tenant's availability as a small bar on the overview. They carry their
// details in <title> elements and text beside them, take their colours
// from the stylesheet, and refresh like any other region.
//
// A badge's colour says what its condition means for the object, as
// condMeaning decides for every page: green as it should be, grey idle,
// amber under way, blue held back on purpose, red in need of someone.
//
// The package must not import reconciler or render, and it never writes
// to the store.
package ui
