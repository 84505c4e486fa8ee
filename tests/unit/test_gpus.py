"""The site's GPU catalog: the shipped one reads, a hostile one is refused naming the
fault, and a fault in it never takes the rest of the policy down."""

import pytest

from slurm_synergy import paths
from slurm_synergy.model.gpus import CatalogError
from slurm_synergy.model.policy import Policy, load_catalog, load_policy

GOOD = """
tolerance = 0.05
[gpu.a10]
memory_mib = 23028
power_w = [100, 150, 150]
idle_w = 15
speed = 0.4
"""


def test_the_shipped_catalog_reads_with_data_sheet_figures():
    catalog = load_catalog(paths.ETC / "policy.toml")
    assert {"t4", "a10", "a100-40gb", "h100"} <= set(catalog)
    t4, h100 = catalog["t4"], catalog["h100"]
    assert (t4.memory_mib, t4.max_power_w) == (15360, 70)
    assert h100.memory_mib > catalog["a100-40gb"].memory_mib > catalog["a10"].memory_mib
    assert all(t.min_power_w <= t.default_power_w <= t.max_power_w for t in catalog.values())


def test_a_policy_without_a_catalog_has_an_empty_one(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text("tolerance = 0.1\n")
    assert load_catalog(path) == {}


@pytest.mark.parametrize("table, fault", [
    ("memory_mib = 23028\npower_w = [100, 150, 150]\nidle_w = 15\n", "missing speed"),
    ("memory_mib = '24G'\npower_w = [100, 150, 150]\nidle_w = 15\nspeed = 1\n",
     "memory_mib must be an integer"),
    ("memory_mib = 23028\npower_w = [150, 100, 150]\nidle_w = 15\nspeed = 1\n",
     "power_w must rise"),
    ("memory_mib = 23028\npower_w = [100, 150]\nidle_w = 15\nspeed = 1\n",
     "power_w must be [min, default, max]"),
    ("memory_mib = 23028\npower_w = [100, 150, 150]\nidle_w = 500\nspeed = 1\n",
     "idle_w 500 is above the lowest power limit"),
    ("memory_mib = 23028\npower_w = [100, 150, 150]\nidle_w = 15\nspeed = -1\n",
     "speed = -1 is outside"),
    ("memory_mib = 23028\npower_w = [100, 150, 150]\nidle_w = 15\nspeed = 1\nrm = 1\n",
     "unknown field(s) rm"),
])
def test_a_hostile_catalog_entry_is_refused_naming_it(tmp_path, table, fault):
    path = tmp_path / "policy.toml"
    path.write_text(f"tolerance = 0.1\n[gpu.a10]\n{table}")
    with pytest.raises(CatalogError, match=r"\[gpu\.a10\]") as e:
        load_catalog(path)
    assert fault in str(e.value)
    # The rest of the policy still reads: the catalog's fault is the catalog's alone.
    assert load_policy(path) == Policy(tolerance=0.1)


def test_a_type_name_that_is_not_a_gres_type_is_refused(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(GOOD.replace("[gpu.a10]", '[gpu."a10;reboot"]'))
    with pytest.raises(CatalogError, match="not a gres type name"):
        load_catalog(path)


def test_a_catalog_that_is_not_tables_is_refused(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text("gpu = 3\n")
    with pytest.raises(CatalogError, match="one table per GPU type"):
        load_catalog(path)
    missing = tmp_path / "none.toml"
    with pytest.raises(CatalogError, match="no site policy"):
        load_catalog(missing)


def test_a_good_entry_reads(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(GOOD)
    a10 = load_catalog(path)["a10"]
    assert (a10.memory_mib, a10.min_power_w, a10.idle_w, a10.speed) == (23028, 100, 15, 0.4)


def test_synergy_plugin_catalog_names_the_fault_and_exits_non_zero(tmp_path, monkeypatch,
                                                                      capsys):
    from slurm_synergy.cli import main
    path = tmp_path / "policy.toml"
    path.write_text(GOOD.replace("speed = 0.4", "speed = 'fast'"))
    monkeypatch.setenv("SYNERGY_POLICY", str(path))
    assert main(["plugin", "catalog"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: [gpu.a10]: speed must be a number, not 'fast'" in err


def test_site_catalog_tells_a_fault_from_no_catalog_and_never_raises(tmp_path):
    from slurm_synergy.model.policy import site_catalog
    path = tmp_path / "policy.toml"
    path.write_text("tolerance = 0.05\n")
    none = site_catalog(path)
    assert not none.types and not none.faulty and "has no GPU catalog" in none.problem
    path.write_text(GOOD.replace("speed = 0.4", "speed = -1"))
    bad = site_catalog(path)
    assert not bad.types and bad.faulty and "speed" in bad.problem
    missing = site_catalog(tmp_path / "absent.toml")
    assert missing.faulty and "no site policy at" in missing.problem
