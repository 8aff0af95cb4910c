# cpu_sparse and cpu_blocksparse run the MLA attend kernel of cpu_mla (src/backends/cpu_mla).
set(ATTN_BACKEND_REQUIRES cpu_mla)
