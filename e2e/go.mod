module github.com/maeshinshin/ichor/e2e

go 1.26.8

replace github.com/maeshinshin/ichor/contracts => ../contracts

// machinery v1.14.1 (through contracts) names two versions the module proxy
// refuses (403); these are the nearest served versions (DESIGN.md §2).
replace (
	github.com/cosi-project/runtime => github.com/cosi-project/runtime v1.16.2
	github.com/jsimonetti/rtnetlink/v2 => github.com/jsimonetti/rtnetlink/v2 v2.3.0
)

require github.com/chromedp/chromedp v0.23.0

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)
