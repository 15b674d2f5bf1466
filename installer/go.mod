module github.com/maeshinshin/ichor/installer

go 1.26.8

require github.com/maeshinshin/ichor/contracts v0.0.0

replace github.com/maeshinshin/ichor/contracts => ../contracts

// machinery v1.14.1 (through contracts) names two versions the module proxy
// refuses (403); these are the nearest served versions (DESIGN.md §2).
replace (
	github.com/cosi-project/runtime => github.com/cosi-project/runtime v1.16.2
	github.com/jsimonetti/rtnetlink/v2 => github.com/jsimonetti/rtnetlink/v2 v2.3.0
)
