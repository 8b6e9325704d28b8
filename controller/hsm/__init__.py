"""HSM / IPP rule compiler: ACL + IDS header rules -> the NPM's classification table entries.

Entry points:

* `rules.parse_classbench`, `rules.acl_rule_from_policy`: the ACL rule model (`AclRule`);
* `snort_header.load_ids_file` / `ids_rules_from_raw`: IDS header rules (`IdsRule`) from a Snort 3
  rules file, with variables (`opengate.snort.header.SnortVariables`, the header semantics the
  SPM shares) and a class map (`ClassMap`); the field algebra (prefixes, port ranges, interval
  sets) is `opengate.fields`;
* `tables.compile_tables`: HSM with integrated segmentation, or the ternary baseline when the
  cross products do not fit (`compile.compile_hsm`, `naive.compile_naive` for one profile);
* `update.ClassifierBanks` / `update.plan_update`: hitless updates (idle bank, then one flip);
* `lookup.Walker`: classify packets by walking installed entries as the P4 pipeline does;
  `linear.LinearClassifier`: the first-match reference;
* `cli`: `opengate hsm compile|classify`.
"""
