// Step 4: classification of a packet without a session, against the ACL and the IDS header rules.
//
// Default profile: HSM with integrated segmentation (IPP). Five segment tables, one per field, each
// return two indexes (ACL, IDS); then two independent aggregation chains (address pair, port pair,
// final) give the ACL verdict and the IDS class. Every table has a 1-bit `version` key: the
// controller writes a new rule set into the idle bank and flips `classifier_version`, so no packet
// sees half old, half new tables.
//
// Hybrid (where the shell defines OG_HSM_SPILL, OG_HSM_IDS_SPILL): rules the compiler spills out
// of the cross products (those that blow them up) sit in a small priority ternary table per rule
// set, `acl_spill` and `ids_spill`, banked like the rest and looked up beside HSM; of the two
// results the rule that comes first wins (rule ids are positions in the rule set), so the verdict
// is still first-match linear search over all the rules. The hybrid (OG_HSM_PARTITIONS) also has
// five more ACL partitions, chains of their own (`acl2_addr_pair`, `acl2_port_pair`,
// `acl2_verdict`, ... `acl6_*`, over indexes the same segment lookups return): the compiler puts
// kinds of rules that would blow up one cross product together (wide in the source and narrow in
// the destination, say, against the other way round; or specific in ports against any port) into
// different chains; again the rule that comes first of the partitions' (and the spill tables')
// results wins.
//
// -DWITH_NAIVE_ACL: one priority ternary table per rule set, the baseline the benchmark compares.
#ifndef OPENGATE_CONTROL_CLASSIFY_P4
#define OPENGATE_CONTROL_CLASSIFY_P4

control Classify(inout headers_t hdr, inout local_metadata_t meta) {
#ifdef OG_HSM_SPILL
#define ACL_SPILL_GAP(rule) OG_SPILL_GAP(meta.acl_spill_gap, rule, meta.acl_rule)
#else
#define ACL_SPILL_GAP(rule)
#endif
#ifdef OG_HSM_IDS_SPILL
#define IDS_SPILL_GAP(rule) OG_SPILL_GAP(meta.ids_spill_gap, rule, meta.ids_rule)
#else
#define IDS_SPILL_GAP(rule)
#endif

    @name(".acl_permit")
    action acl_permit(rule_id_t rule_id) {
        ACL_SPILL_GAP(rule_id)
        meta.acl_verdict = ACL_PERMIT;
        meta.acl_rule = rule_id;
    }

    @name(".acl_deny")
    action acl_deny(rule_id_t rule_id) {
        ACL_SPILL_GAP(rule_id)
        meta.acl_verdict = ACL_DENY;
        meta.acl_rule = rule_id;
    }

    @name(".acl_to_cpu")
    action acl_to_cpu(rule_id_t rule_id) {
        ACL_SPILL_GAP(rule_id)
        meta.acl_verdict = ACL_TO_CPU;
        meta.acl_rule = rule_id;
    }

    @name(".set_ids_class")
    action set_ids_class(class_id_t class_id, rule_id_t rule_id) {
        IDS_SPILL_GAP(rule_id)
        meta.ids_class = class_id;
        meta.ids_rule = rule_id;
    }

#ifdef WITH_NAIVE_ACL
    @name(".acl_naive")
    table acl_naive {
        key = {
            hdr.ipv4.src_addr : ternary @name("ipv4_src");
            hdr.ipv4.dst_addr : ternary @name("ipv4_dst");
            meta.l4_sport     : range @name("l4_sport");
            meta.l4_dport     : range @name("l4_dport");
            hdr.ipv4.protocol : ternary @name("ip_proto");
        }
        actions = { acl_permit; acl_deny; acl_to_cpu; }
        default_action = acl_deny(RULE_NONE);
        size = ACL_NAIVE_TABLE_SIZE;
    }

    @name(".ids_naive")
    table ids_naive {
        key = {
            hdr.ipv4.src_addr : ternary @name("ipv4_src");
            hdr.ipv4.dst_addr : ternary @name("ipv4_dst");
            meta.l4_sport     : range @name("l4_sport");
            meta.l4_dport     : range @name("l4_dport");
            hdr.ipv4.protocol : ternary @name("ip_proto");
        }
        actions = { set_ids_class; }
        default_action = set_ids_class(0, RULE_NONE);
        size = IDS_NAIVE_TABLE_SIZE;
    }

    apply {
        acl_naive.apply();
        ids_naive.apply();
    }
#else
    @name(".set_classifier_version")
    action set_classifier_version(bit<1> version) {
        meta.classifier_version = version;
    }

    OG_PLACE_EARLY
    @name(".classifier_version")
    table classifier_version {
        key = { }
        actions = { set_classifier_version; }
        default_action = set_classifier_version(0);
        size = 1;
    }

#ifdef OG_HSM_PARTITIONS
    // The segment actions also give the other ACL partitions' indexes (the last parameters, so
    // the others keep their P4Runtime ids).
#define PARTITION_INDEX_PARAMS                                                                  \
    , seg_index_t acl2_index, seg_index_t acl3_index, seg_index_t acl4_index,                   \
    seg_index_t acl5_index, seg_index_t acl6_index
#define PARTITION_INDEX_ARGS , 0, 0, 0, 0, 0
#define PARTITION_INDEX_SET(field)                                                              \
    meta.acl2_##field = acl2_index; meta.acl3_##field = acl3_index;                             \
    meta.acl4_##field = acl4_index; meta.acl5_##field = acl5_index;                             \
    meta.acl6_##field = acl6_index;
#else
#define PARTITION_INDEX_PARAMS
#define PARTITION_INDEX_ARGS
#define PARTITION_INDEX_SET(field)
#endif

    // Segment tables: one lookup per field serves both rule sets.
    @name(".set_sa_index")
    action set_sa_index(seg_index_t acl_index, seg_index_t ids_index PARTITION_INDEX_PARAMS) {
        meta.acl_sa_index = acl_index;
        meta.ids_sa_index = ids_index;
        PARTITION_INDEX_SET(sa_index)
    }

    @name(".set_da_index")
    action set_da_index(seg_index_t acl_index, seg_index_t ids_index PARTITION_INDEX_PARAMS) {
        meta.acl_da_index = acl_index;
        meta.ids_da_index = ids_index;
        PARTITION_INDEX_SET(da_index)
    }

    @name(".set_sp_index")
    action set_sp_index(seg_index_t acl_index, seg_index_t ids_index PARTITION_INDEX_PARAMS) {
        meta.acl_sp_index = acl_index;
        meta.ids_sp_index = ids_index;
        PARTITION_INDEX_SET(sp_index)
    }

    @name(".set_dp_index")
    action set_dp_index(seg_index_t acl_index, seg_index_t ids_index PARTITION_INDEX_PARAMS) {
        meta.acl_dp_index = acl_index;
        meta.ids_dp_index = ids_index;
        PARTITION_INDEX_SET(dp_index)
    }

    @name(".set_proto_index")
    action set_proto_index(seg_index_t acl_index, seg_index_t ids_index PARTITION_INDEX_PARAMS) {
        meta.acl_proto_index = acl_index;
        meta.ids_proto_index = ids_index;
        PARTITION_INDEX_SET(proto_index)
    }

    OG_PLACE_EARLY
    @name(".sa_segment")
    table sa_segment {
        key = {
            meta.classifier_version : exact @name("version");
            hdr.ipv4.src_addr       : lpm @name("ipv4_src");
        }
        actions = { set_sa_index; }
        const default_action = set_sa_index(0, 0 PARTITION_INDEX_ARGS);
        size = SA_SEGMENT_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".da_segment")
    table da_segment {
        key = {
            meta.classifier_version : exact @name("version");
            hdr.ipv4.dst_addr       : lpm @name("ipv4_dst");
        }
        actions = { set_da_index; }
        const default_action = set_da_index(0, 0 PARTITION_INDEX_ARGS);
        size = DA_SEGMENT_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".sp_segment")
    table sp_segment {
        key = {
            meta.classifier_version : exact @name("version");
            meta.l4_sport           : range @name("l4_sport");
        }
        actions = { set_sp_index; }
        const default_action = set_sp_index(0, 0 PARTITION_INDEX_ARGS);
        size = SP_SEGMENT_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".dp_segment")
    table dp_segment {
        key = {
            meta.classifier_version : exact @name("version");
            meta.l4_dport           : range @name("l4_dport");
        }
        actions = { set_dp_index; }
        const default_action = set_dp_index(0, 0 PARTITION_INDEX_ARGS);
        size = DP_SEGMENT_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".proto_segment")
    table proto_segment {
        key = {
            meta.classifier_version : exact @name("version");
            hdr.ipv4.protocol       : ternary @name("ip_proto");
        }
        actions = { set_proto_index; }
        const default_action = set_proto_index(0, 0 PARTITION_INDEX_ARGS);
        size = PROTO_SEGMENT_TABLE_SIZE;
    }

    // ACL aggregation.
    @name(".set_acl_addr_index")
    action set_acl_addr_index(agg_index_t index) {
        meta.acl_addr_index = index;
    }

    @name(".set_acl_port_index")
    action set_acl_port_index(agg_index_t index) {
        meta.acl_port_index = index;
    }

    @name(".acl_addr_pair")
    table acl_addr_pair {
        key = {
            meta.classifier_version : exact @name("version");
            meta.acl_sa_index       : exact @name("acl_sa_index");
            meta.acl_da_index       : exact @name("acl_da_index");
        }
        actions = { set_acl_addr_index; }
        const default_action = set_acl_addr_index(0);
        size = ACL_ADDR_PAIR_TABLE_SIZE;
    }

    @name(".acl_port_pair")
    table acl_port_pair {
        key = {
            meta.classifier_version : exact @name("version");
            meta.acl_sp_index       : exact @name("acl_sp_index");
            meta.acl_dp_index       : exact @name("acl_dp_index");
        }
        actions = { set_acl_port_index; }
        const default_action = set_acl_port_index(0);
        size = ACL_PORT_PAIR_TABLE_SIZE;
    }

    @name(".acl_verdict")
    table acl_verdict {
        key = {
            meta.classifier_version : exact @name("version");
            meta.acl_addr_index     : exact @name("acl_addr_index");
            meta.acl_port_index     : exact @name("acl_port_index");
            meta.acl_proto_index    : exact @name("acl_proto_index");
        }
        actions = { acl_permit; acl_deny; acl_to_cpu; }
        default_action = acl_deny(RULE_NONE);   // the policy's default verdict, set by the CPM
        size = ACL_VERDICT_TABLE_SIZE;
    }

    // IDS aggregation.
    @name(".set_ids_addr_index")
    action set_ids_addr_index(agg_index_t index) {
        meta.ids_addr_index = index;
    }

    @name(".set_ids_port_index")
    action set_ids_port_index(agg_index_t index) {
        meta.ids_port_index = index;
    }

    OG_PLACE_EARLY
    @name(".ids_addr_pair")
    table ids_addr_pair {
        key = {
            meta.classifier_version : exact @name("version");
            meta.ids_sa_index       : exact @name("ids_sa_index");
            meta.ids_da_index       : exact @name("ids_da_index");
        }
        actions = { set_ids_addr_index; }
        const default_action = set_ids_addr_index(0);
        size = IDS_ADDR_PAIR_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".ids_port_pair")
    table ids_port_pair {
        key = {
            meta.classifier_version : exact @name("version");
            meta.ids_sp_index       : exact @name("ids_sp_index");
            meta.ids_dp_index       : exact @name("ids_dp_index");
        }
        actions = { set_ids_port_index; }
        const default_action = set_ids_port_index(0);
        size = IDS_PORT_PAIR_TABLE_SIZE;
    }

    OG_PLACE_EARLY
    @name(".ids_classification")
    table ids_classification {
        key = {
            meta.classifier_version : exact @name("version");
            meta.ids_addr_index     : exact @name("ids_addr_index");
            meta.ids_port_index     : exact @name("ids_port_index");
            meta.ids_proto_index    : exact @name("ids_proto_index");
        }
        actions = { set_ids_class; }
        const default_action = set_ids_class(0, RULE_NONE);
        size = IDS_CLASS_TABLE_SIZE;
    }

#ifdef OG_HSM_PARTITIONS
    // The other ACL partitions: the same chain as the first over their own indexes; a miss in a
    // partition's final table leaves the verdict found so far.
#define NAME_STR(x) #x
#define NAME_XSTR(x) NAME_STR(x)
#define ACL_PARTITION_CHAIN(P, ADDR_SIZE, PORT_SIZE, VERDICT_SIZE)                            \
    @name(NAME_XSTR(.set_##P##_addr_index))                                                   \
    action set_##P##_addr_index(agg_index_t index) {                                          \
        meta.P##_addr_index = index;                                                          \
    }                                                                                         \
    @name(NAME_XSTR(.set_##P##_port_index))                                                   \
    action set_##P##_port_index(agg_index_t index) {                                          \
        meta.P##_port_index = index;                                                          \
    }                                                                                         \
    @name(NAME_XSTR(.P##_addr_pair))                                                          \
    table P##_addr_pair {                                                                     \
        key = {                                                                               \
            meta.classifier_version : exact @name("version");                                 \
            meta.P##_sa_index       : exact @name(NAME_XSTR(P##_sa_index));                   \
            meta.P##_da_index       : exact @name(NAME_XSTR(P##_da_index));                   \
        }                                                                                     \
        actions = { set_##P##_addr_index; }                                                   \
        const default_action = set_##P##_addr_index(0);                                       \
        size = ADDR_SIZE;                                                                     \
    }                                                                                         \
    @name(NAME_XSTR(.P##_port_pair))                                                          \
    table P##_port_pair {                                                                     \
        key = {                                                                               \
            meta.classifier_version : exact @name("version");                                 \
            meta.P##_sp_index       : exact @name(NAME_XSTR(P##_sp_index));                   \
            meta.P##_dp_index       : exact @name(NAME_XSTR(P##_dp_index));                   \
        }                                                                                     \
        actions = { set_##P##_port_index; }                                                   \
        const default_action = set_##P##_port_index(0);                                       \
        size = PORT_SIZE;                                                                     \
    }                                                                                         \
    @name(NAME_XSTR(.P##_verdict))                                                            \
    table P##_verdict {                                                                       \
        key = {                                                                               \
            meta.classifier_version : exact @name("version");                                 \
            meta.P##_addr_index     : exact @name(NAME_XSTR(P##_addr_index));                 \
            meta.P##_port_index     : exact @name(NAME_XSTR(P##_port_index));                 \
            meta.P##_proto_index    : exact @name(NAME_XSTR(P##_proto_index));                \
        }                                                                                     \
        actions = { acl_permit; acl_deny; acl_to_cpu; @defaultonly NoAction; }                \
        const default_action = NoAction();                                                    \
        size = VERDICT_SIZE;                                                                  \
    }

    ACL_PARTITION_CHAIN(acl2, ACL2_ADDR_PAIR_TABLE_SIZE, ACL2_PORT_PAIR_TABLE_SIZE,
                     ACL2_VERDICT_TABLE_SIZE)
    ACL_PARTITION_CHAIN(acl3, ACL3_ADDR_PAIR_TABLE_SIZE, ACL3_PORT_PAIR_TABLE_SIZE,
                     ACL3_VERDICT_TABLE_SIZE)
    ACL_PARTITION_CHAIN(acl4, ACL4_ADDR_PAIR_TABLE_SIZE, ACL4_PORT_PAIR_TABLE_SIZE,
                     ACL4_VERDICT_TABLE_SIZE)
    ACL_PARTITION_CHAIN(acl5, ACL5_ADDR_PAIR_TABLE_SIZE, ACL5_PORT_PAIR_TABLE_SIZE,
                     ACL5_VERDICT_TABLE_SIZE)
    ACL_PARTITION_CHAIN(acl6, ACL6_ADDR_PAIR_TABLE_SIZE, ACL6_PORT_PAIR_TABLE_SIZE,
                     ACL6_VERDICT_TABLE_SIZE)
#endif

#ifdef OG_HSM_SPILL

    @name(".acl_spill")
    table acl_spill {
        key = {
            meta.classifier_version : exact @name("version");
            hdr.ipv4.src_addr       : ternary @name("ipv4_src");
            hdr.ipv4.dst_addr       : ternary @name("ipv4_dst");
            meta.l4_sport           : range @name("l4_sport");
            meta.l4_dport           : range @name("l4_dport");
            hdr.ipv4.protocol       : ternary @name("ip_proto");
        }
        actions = { acl_permit; acl_deny; acl_to_cpu; @defaultonly NoAction; }
        const default_action = NoAction();
        size = ACL_SPILL_TABLE_SIZE;
    }

#endif

#ifdef OG_HSM_IDS_SPILL
    @name(".ids_spill")
    table ids_spill {
        key = {
            meta.classifier_version : exact @name("version");
            hdr.ipv4.src_addr       : ternary @name("ipv4_src");
            hdr.ipv4.dst_addr       : ternary @name("ipv4_dst");
            meta.l4_sport           : range @name("l4_sport");
            meta.l4_dport           : range @name("l4_dport");
            hdr.ipv4.protocol       : ternary @name("ip_proto");
        }
        actions = { set_ids_class; @defaultonly NoAction; }
        const default_action = NoAction();
        size = IDS_SPILL_TABLE_SIZE;
    }
#endif

    apply {
        classifier_version.apply();
        // The spilled rules first; HSM's verdict below overwrites the metadata (its action taking
        // the gap to the spilled rule, where the target needs it), then the rule that comes first
        // of the two is kept.
#ifdef OG_HSM_SPILL
        meta.acl_rule = RULE_NONE;
        acl_spill.apply();
        acl_verdict_t spill_verdict = meta.acl_verdict;
        meta.spill_acl_rule = meta.acl_rule;
#endif
#ifdef OG_HSM_IDS_SPILL
        meta.ids_rule = RULE_NONE;
        ids_spill.apply();
        class_id_t spill_class = meta.ids_class;
        meta.spill_ids_rule = meta.ids_rule;
#endif
        sa_segment.apply();
        da_segment.apply();
        sp_segment.apply();
        dp_segment.apply();
        proto_segment.apply();
        acl_addr_pair.apply();
        acl_port_pair.apply();
        acl_verdict.apply();
#ifdef OG_HSM_PARTITIONS
        acl2_addr_pair.apply();
        acl2_port_pair.apply();
        acl3_addr_pair.apply();
        acl3_port_pair.apply();
        acl4_addr_pair.apply();
        acl4_port_pair.apply();
        acl5_addr_pair.apply();
        acl5_port_pair.apply();
        acl6_addr_pair.apply();
        acl6_port_pair.apply();
        // Each partition's verdict, then the earlier rule of it and the verdict so far.
#define ACL_PARTITION_MERGE(P)                                                                  \
        {                                                                                       \
            acl_verdict_t before_verdict = meta.acl_verdict;                                    \
            rule_id_t before_rule = meta.acl_rule;                                              \
            P##_verdict.apply();                                                                \
            if (before_rule < meta.acl_rule) {                                                  \
                meta.acl_verdict = before_verdict;                                              \
                meta.acl_rule = before_rule;                                                    \
            }                                                                                   \
        }
        ACL_PARTITION_MERGE(acl2)
        ACL_PARTITION_MERGE(acl3)
        ACL_PARTITION_MERGE(acl4)
        ACL_PARTITION_MERGE(acl5)
        ACL_PARTITION_MERGE(acl6)
#endif
        ids_addr_pair.apply();
        ids_port_pair.apply();
        ids_classification.apply();
#ifdef OG_HSM_SPILL
        if (OG_SPILL_FIRST(meta.acl_spill_gap, meta.spill_acl_rule, meta.acl_rule)) {
            meta.acl_verdict = spill_verdict;
            meta.acl_rule = meta.spill_acl_rule;
        }
#endif
#ifdef OG_HSM_IDS_SPILL
        if (OG_SPILL_FIRST(meta.ids_spill_gap, meta.spill_ids_rule, meta.ids_rule)) {
            meta.ids_class = spill_class;
            meta.ids_rule = meta.spill_ids_rule;
        }
#endif
    }
#endif
}

#endif
